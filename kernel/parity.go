package kernel

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Parity holds our kernel to Kata Containers' own guest kernel: every symbol of the Kata list must
// have Kata's value in our final config, or a line of its own in the parity allow-list saying why not.
type Parity struct {
	Symbols   string // the Kata list (kernel/kata/kata-VERSION-ARCH.conf)
	Allowlist string // the parity allow-list
}

// AbsentCategory is the allow-list category claiming that a symbol is not in our kernel's Kconfig
// at all (Kata pins a newer or older Linux). The proof checks the claim against the source.
const AbsentCategory = "absent"

// Deviation is one parity allow-list line: why we do not match Kata on a symbol.
type Deviation struct {
	Category string // the word before the colon: netfilter, drivers, absent, ...
	Reason   string
	Line     int
}

// ParityAllowlist maps a symbol to the reason we differ from Kata on it.
type ParityAllowlist map[string]Deviation

// ParseParityAllowlist reads "CONFIG_NAME category: reason" lines; '#' starts a comment line. Each
// symbol has its own line; the category groups the reasons (and "absent" is checked against Kconfig).
func ParseParityAllowlist(r io.Reader, file string) (ParityAllowlist, error) {
	a := ParityAllowlist{}
	err := scanSymbolLines(r, file, func(n int, sym, name, rest string) error {
		cat, reason, hasColon := strings.Cut(strings.TrimSpace(rest), ":")
		cat, reason = strings.TrimSpace(cat), strings.TrimSpace(reason)
		if !hasColon || cat == "" || strings.ContainsAny(cat, " \t") || reason == "" {
			return fmt.Errorf("%s:%d: %s needs \"category: reason\" after the name, e.g. \"%s netfilter: the guest does no packet filtering\"", file, n, sym, sym)
		}
		if prev, dup := a[name]; dup {
			return fmt.Errorf("%s:%d: %s is listed again (first on line %d): keep one line", file, n, sym, prev.Line)
		}
		a[name] = Deviation{Category: cat, Reason: reason, Line: n}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// SymbolSet answers whether our kernel's Kconfig declares a symbol.
type SymbolSet interface{ Defined(sym string) bool }

// ParityReport counts how our kernel stands against Kata's list.
type ParityReport struct {
	Kata       string         // "4.1.0 x86_64"
	Total      int            // symbols Kata requests
	Matched    int            // with Kata's value in our final config
	ByCategory map[string]int // allow-listed, per category
}

func (r *ParityReport) String() string {
	cats := make([]string, 0, len(r.ByCategory))
	for c := range r.ByCategory {
		cats = append(cats, c)
	}
	sort.Slice(cats, func(i, j int) bool {
		if r.ByCategory[cats[i]] != r.ByCategory[cats[j]] {
			return r.ByCategory[cats[i]] > r.ByCategory[cats[j]]
		}
		return cats[i] < cats[j]
	})
	parts := make([]string, len(cats))
	for i, c := range cats {
		parts[i] = fmt.Sprintf("%s %d", c, r.ByCategory[c])
	}
	return fmt.Sprintf("Kata %s: %d symbols, %d matched, %d allow-listed (%s)", r.Kata, r.Total, r.Matched,
		r.Total-r.Matched, strings.Join(parts, ", "))
}

// ParityError lists every way our kernel and the allow-list disagree with Kata's list.
type ParityError struct {
	Kata     string
	Problems []string
}

func (e *ParityError) Error() string {
	return fmt.Sprintf("kernel parity with Kata %s failed: %d problem(s)\n  %s", e.Kata, len(e.Problems), strings.Join(e.Problems, "\n  "))
}

// ProveParity checks final against Kata's list: each Kata symbol has Kata's value, or an allow-list
// line. An allow-list line for a symbol we now match, or one Kata does not request, is stale; one in
// the "absent" category must name a symbol our Kconfig does not declare, and a symbol it does not
// declare must be in that category.
func ProveParity(kata *KataList, final Config, allow ParityAllowlist, syms SymbolSet, allowFile string) (*ParityReport, error) {
	rep := &ParityReport{Kata: kata.Version + " " + kata.Arch, Total: len(kata.Settings), ByCategory: map[string]int{}}
	var problems []string
	for _, s := range kata.Settings {
		got := final.Value(s.Symbol)
		d, listed := allow[s.Symbol]
		defined := syms.Defined(s.Symbol)
		switch {
		case got == s.Value && listed:
			problems = append(problems, fmt.Sprintf("%s:%d: CONFIG_%s is stale: our final .config now has Kata's %s (%s); remove the line",
				allowFile, d.Line, s.Symbol, s.Value, s.Where()))
		case got == s.Value:
			rep.Matched++
		case !listed:
			fix := "enable it in a kernel/fragments/80-kata-*.conf fragment (with what it depends on)"
			if !defined {
				fix = "it is not in this kernel's Kconfig: enable its equivalent"
			}
			problems = append(problems, fmt.Sprintf("CONFIG_%s: Kata requests %s (%s), our final .config has %s: %s, or add \"CONFIG_%s category: reason\" to %s",
				s.Symbol, s.Value, s.Where(), describe(got), fix, s.Symbol, allowFile))
		case d.Category == AbsentCategory && defined:
			problems = append(problems, fmt.Sprintf("%s:%d: CONFIG_%s is claimed %s, but this kernel's Kconfig declares it (our value %s, Kata's %s from %s): give the real reason",
				allowFile, d.Line, s.Symbol, AbsentCategory, describe(got), s.Value, s.Where()))
		case d.Category != AbsentCategory && !defined:
			problems = append(problems, fmt.Sprintf("%s:%d: CONFIG_%s is not in this kernel's Kconfig: use the category %q and name its equivalent",
				allowFile, d.Line, s.Symbol, AbsentCategory))
		default:
			rep.ByCategory[d.Category]++
		}
	}
	for _, sym := range sortedDeviations(allow) {
		if _, ok := kata.Lookup(sym); !ok {
			problems = append(problems, fmt.Sprintf("%s:%d: CONFIG_%s is not in Kata %s's list: remove the line",
				allowFile, allow[sym].Line, sym, kata.Version))
		}
	}
	if len(problems) > 0 {
		return rep, &ParityError{Kata: rep.Kata, Problems: problems}
	}
	return rep, nil
}

func sortedDeviations(a ParityAllowlist) []string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// parityInputs are the parsed Kata list and allow-list of a spec.
type parityInputs struct {
	kata  *KataList
	allow ParityAllowlist
	p     *Parity
}

func readParity(p *Parity) (*parityInputs, error) {
	if p == nil {
		return nil, nil
	}
	f, err := os.Open(p.Symbols)
	if err != nil {
		return nil, fmt.Errorf("read Kata symbol list: %w", err)
	}
	kata, err := ParseKataList(f, p.Symbols)
	f.Close()
	if err != nil {
		return nil, err
	}
	a, err := os.Open(p.Allowlist)
	if err != nil {
		return nil, fmt.Errorf("read parity allow-list: %w", err)
	}
	allow, err := ParseParityAllowlist(a, p.Allowlist)
	a.Close()
	if err != nil {
		return nil, err
	}
	return &parityInputs{kata: kata, allow: allow, p: p}, nil
}
