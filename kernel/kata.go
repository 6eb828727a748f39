package kernel

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// KataList is what Kata Containers' own guest kernel build requests for one architecture: every
// symbol its fragments set, with the value of the last fragment that set it. Setting.File is the
// Kata fragment (relative to tools/packaging/kernel/configs/fragments) and Setting.Line its line there.
type KataList struct {
	Version   string   // the Kata release, e.g. "4.1.0"
	Arch      string   // Kata's architecture name, e.g. "x86_64"
	Selection []string // the fragment files read, in order
	Settings  []Setting
	index     map[string]int
}

// Lookup returns the setting Kata requests for sym.
func (l *KataList) Lookup(sym string) (Setting, bool) {
	i, ok := l.index[sym]
	if !ok {
		return Setting{}, false
	}
	return l.Settings[i], true
}

// KataSelection lists the fragment files Kata's build-kernel.sh (get_kernel_frag_path) merges for a
// plain guest kernel of arch: common/*.conf except the files that carry the tag "!arch", then
// arch/*.conf (the top level only: confidential, snp, tdx, gpu, debug, build-type and signing are
// opt-in variants). Paths are relative to fragDir, in merge order.
func KataSelection(fragDir, arch string) ([]string, error) {
	var sel []string
	for _, dir := range []string{"common", arch} {
		matches, err := filepath.Glob(filepath.Join(fragDir, dir, "*.conf"))
		if err != nil {
			return nil, err
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("no fragments in %s: point at tools/packaging/kernel/configs/fragments of a Kata checkout", filepath.Join(fragDir, dir))
		}
		sort.Strings(matches)
		for _, m := range matches {
			data, err := os.ReadFile(m)
			if err != nil {
				return nil, err
			}
			if dir == "common" && bytes.Contains(data, []byte("!"+arch)) {
				continue
			}
			sel = append(sel, path.Join(dir, filepath.Base(m)))
		}
	}
	return sel, nil
}

// ReadKataFragments merges the selected fragments as Kata's merge_config.sh does: a later file
// overrides an earlier one, and "# CONFIG_X is not set" means n.
func ReadKataFragments(fragDir, version, arch string) (*KataList, error) {
	sel, err := KataSelection(fragDir, arch)
	if err != nil {
		return nil, err
	}
	l := &KataList{Version: version, Arch: arch, Selection: sel, index: map[string]int{}}
	for _, rel := range sel {
		f, err := os.Open(filepath.Join(fragDir, rel))
		if err != nil {
			return nil, err
		}
		settings, err := ParseConfig(f, rel)
		f.Close()
		if err != nil {
			return nil, err
		}
		for _, s := range settings {
			l.set(s)
		}
	}
	sort.Slice(l.Settings, func(i, j int) bool { return l.Settings[i].Symbol < l.Settings[j].Symbol })
	l.reindex()
	return l, nil
}

func (l *KataList) set(s Setting) {
	if i, ok := l.index[s.Symbol]; ok {
		l.Settings[i] = s
		return
	}
	l.index[s.Symbol] = len(l.Settings)
	l.Settings = append(l.Settings, s)
}

func (l *KataList) reindex() {
	l.index = make(map[string]int, len(l.Settings))
	for i, s := range l.Settings {
		l.index[s.Symbol] = i
	}
}

// The list file: a header of "# key: value" lines, then one "CONFIG_X=value<TAB>file:line" per
// symbol, sorted by symbol. The value is written as in a .config, so the file reads like a fragment.
const (
	kataVersionKey   = "# kata-version: "
	kataArchKey      = "# arch: "
	kataSelectionKey = "# fragment: "
)

// WriteKataList writes l in the list file format, with a header that names the Kata version, the
// selection and how to regenerate it.
func WriteKataList(w io.Writer, l *KataList, regenerate string) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# The symbols Kata Containers %s's own %s guest kernel requests, merged from its fragments\n", l.Version, l.Arch)
	fmt.Fprintf(bw, "# (tools/packaging/kernel/configs/fragments) as its build-kernel.sh does for a plain guest: common/*.conf\n")
	fmt.Fprintf(bw, "# without the files tagged !%s, then %s/*.conf (top level only; no confidential, snp, tdx, gpu, debug,\n", l.Arch, l.Arch)
	fmt.Fprintf(bw, "# build-type or signing fragments). A later file overrides an earlier one; \"is not set\" is n.\n")
	fmt.Fprintf(bw, "# Each line: the value Kata asks for, a tab, the Kata fragment and line it comes from.\n")
	fmt.Fprintf(bw, "# Generated, do not edit: %s\n", regenerate)
	fmt.Fprintf(bw, "%s%s\n%s%s\n", kataVersionKey, l.Version, kataArchKey, l.Arch)
	for _, s := range l.Selection {
		fmt.Fprintf(bw, "%s%s\n", kataSelectionKey, s)
	}
	for _, s := range l.Settings {
		fmt.Fprintf(bw, "%s\t%s\n", s, s.Where())
	}
	return bw.Flush()
}

// ParseKataList reads a list written by WriteKataList. Every symbol line must name its Kata
// fragment; a symbol listed twice is an error.
func ParseKataList(r io.Reader, file string) (*KataList, error) {
	l := &KataList{index: map[string]int{}}
	var errs []error
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, kataVersionKey); ok {
			l.Version = strings.TrimSpace(v)
		} else if v, ok := strings.CutPrefix(line, kataArchKey); ok {
			l.Arch = strings.TrimSpace(v)
		} else if v, ok := strings.CutPrefix(line, kataSelectionKey); ok {
			l.Selection = append(l.Selection, strings.TrimSpace(v))
		}
		if strings.TrimSpace(line) == "" || (strings.HasPrefix(line, "#") && !strings.HasSuffix(strings.SplitN(line, "\t", 2)[0], "is not set")) {
			continue
		}
		s, err := parseKataLine(line, file, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := l.index[s.Symbol]; dup {
			errs = append(errs, fmt.Errorf("%s:%d: CONFIG_%s is listed twice: keep the line the generator wrote", file, n, s.Symbol))
			continue
		}
		l.set(s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	if l.Version == "" {
		errs = append(errs, fmt.Errorf("%s: no %q header line: regenerate the list", file, strings.TrimSpace(kataVersionKey)))
	}
	if len(l.Settings) == 0 {
		errs = append(errs, fmt.Errorf("%s: lists no symbol: regenerate it from a Kata checkout", file))
	}
	return l, errors.Join(errs...)
}

func parseKataLine(line, file string, n int) (Setting, error) {
	cfg, from, ok := strings.Cut(line, "\t")
	fragFile, fragLine, ok2 := strings.Cut(from, ":")
	var ln int
	if _, err := fmt.Sscanf(fragLine, "%d", &ln); !ok || !ok2 || err != nil || fragFile == "" {
		return Setting{}, fmt.Errorf("%s:%d: %q must be CONFIG_NAME=value, a tab, and the Kata fragment file:line it comes from", file, n, line)
	}
	settings, err := ParseConfig(strings.NewReader(cfg), fmt.Sprintf("%s:%d", file, n))
	if err != nil {
		return Setting{}, err
	}
	if len(settings) != 1 {
		return Setting{}, fmt.Errorf("%s:%d: %q holds no config setting", file, n, cfg)
	}
	s := settings[0]
	s.File, s.Line = fragFile, ln
	return s, nil
}
