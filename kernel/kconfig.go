package kernel

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Kconfig is what the Kconfig tree says about each symbol: enough to explain why a requested value
// did not survive olddefconfig. It is read from the kernel source, not guessed.
type Kconfig struct {
	syms map[string]*symbol
}

type symbol struct {
	depends    []string // own "depends on" plus inherited if/menu/choice conditions
	prompts    []string // prompt conditions ("" = unconditional prompt)
	hasPrompt  bool
	defined    bool // a config or menuconfig entry declares it (not only a select or depends naming it)
	selectedBy []selector
}

type selector struct{ by, cond string }

// ReadKconfig parses the Kconfig tree under srcDir for arch (the SRCARCH, e.g. "x86").
func ReadKconfig(srcDir, arch string) (*Kconfig, error) {
	r := &kconfigReader{src: srcDir, arch: arch, k: &Kconfig{syms: map[string]*symbol{}}}
	if err := r.file("Kconfig", nil); err != nil {
		return nil, err
	}
	return r.k, nil
}

type kconfigReader struct {
	src, arch string
	k         *Kconfig
}

func (k *Kconfig) sym(name string) *symbol {
	s := k.syms[name]
	if s == nil {
		s = &symbol{}
		k.syms[name] = s
	}
	return s
}

// logicalLines joins backslash continuations and returns lines with their indentation kept.
func logicalLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`))
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out, sc.Err()
}

func indent(line string) int {
	n := 0
	for _, c := range line {
		switch c {
		case ' ':
			n++
		case '\t':
			n += 8 - n%8
		default:
			return n
		}
	}
	return -1 // blank
}

func (r *kconfigReader) file(rel string, inherited []string) error {
	lines, err := logicalLines(filepath.Join(r.src, rel))
	if err != nil {
		return fmt.Errorf("read Kconfig: %w", err)
	}
	conds := append([]string(nil), inherited...)
	var blocks []int // len(conds) at each if/menu/choice start
	var cur *symbol
	var curName string
	pendingBlock := false // a menu or choice whose "depends on" lines follow
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kw, rest := keyword(line)
		rest = strings.TrimSpace(stripComment(rest))
		switch kw {
		case "config", "menuconfig":
			cur, curName = r.k.sym(rest), rest
			cur.defined = true
			cur.depends = append(cur.depends, conds...)
			pendingBlock = false
		case "choice":
			blocks = append(blocks, len(conds))
			cur, pendingBlock = nil, true
		case "menu":
			blocks = append(blocks, len(conds))
			cur, pendingBlock = nil, true
		case "if":
			blocks = append(blocks, len(conds))
			conds = append(conds, rest)
			cur, pendingBlock = nil, false
		case "endif", "endmenu", "endchoice":
			if n := len(blocks); n > 0 {
				conds, blocks = conds[:blocks[n-1]], blocks[:n-1]
			}
			cur, pendingBlock = nil, false
		case "comment", "mainmenu":
			cur, pendingBlock = nil, false
		case "source", "osource", "rsource", "orsource":
			path := strings.Trim(rest, `"`)
			path = strings.ReplaceAll(path, "$(SRCARCH)", r.arch)
			if strings.HasPrefix(kw, "r") || strings.HasPrefix(kw, "or") {
				path = filepath.Join(filepath.Dir(rel), path)
			}
			if err := r.sourceGlob(path, conds, strings.HasPrefix(kw, "o")); err != nil {
				return err
			}
			cur, pendingBlock = nil, false
		case "depends":
			expr := strings.TrimSpace(strings.TrimPrefix(rest, "on"))
			switch {
			case cur != nil:
				cur.depends = append(cur.depends, expr)
			case pendingBlock:
				conds = append(conds, expr)
			}
		case "bool", "tristate", "string", "hex", "int", "prompt", "def_bool", "def_tristate":
			if cur != nil {
				r.prompt(cur, kw, rest)
			}
		case "select", "imply":
			if cur != nil && kw == "select" {
				target, cond, _ := strings.Cut(rest, " if ")
				t := r.k.sym(strings.TrimSpace(target))
				t.selectedBy = append(t.selectedBy, selector{by: curName, cond: strings.TrimSpace(cond)})
			}
		case "help", "---help---":
			i = skipHelp(lines, i)
		}
	}
	return nil
}

// keyword splits a Kconfig line at its first space or tab ("config\tIP_VS_RR" is common).
func keyword(line string) (kw, rest string) {
	if i := strings.IndexAny(line, " \t"); i >= 0 {
		return line[:i], line[i+1:]
	}
	return line, ""
}

// Defined reports whether a config or menuconfig entry of this Kconfig tree declares sym.
func (k *Kconfig) Defined(sym string) bool {
	s, ok := k.syms[sym]
	return ok && s.defined
}

// Symbols lists the declared symbols, sorted.
func (k *Kconfig) Symbols() []string {
	var out []string
	for name, s := range k.syms {
		if s.defined {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (r *kconfigReader) sourceGlob(path string, conds []string, optional bool) error {
	matches, _ := filepath.Glob(filepath.Join(r.src, path))
	if len(matches) == 0 && !optional && !strings.Contains(path, "$(") {
		return fmt.Errorf("read Kconfig: source %q not found", path)
	}
	sort.Strings(matches)
	for _, m := range matches {
		rel, _ := filepath.Rel(r.src, m)
		if err := r.file(rel, conds); err != nil {
			return err
		}
	}
	return nil
}

// prompt records a type or prompt line: `bool "text" if COND`, `prompt "text"`, `def_bool y`.
func (r *kconfigReader) prompt(s *symbol, kw, rest string) {
	if strings.HasPrefix(kw, "def_") || !strings.HasPrefix(rest, `"`) {
		return
	}
	end := strings.Index(rest[1:], `"`)
	if end < 0 {
		return
	}
	after := strings.TrimSpace(rest[end+2:])
	s.hasPrompt = true
	s.prompts = append(s.prompts, strings.TrimSpace(strings.TrimPrefix(after, "if")))
}

func stripComment(s string) string {
	inQuote := false
	for i, c := range s {
		switch {
		case c == '"':
			inQuote = !inQuote
		case c == '#' && !inQuote:
			return s[:i]
		}
	}
	return s
}

func skipHelp(lines []string, i int) int {
	base := indent(lines[i])
	helpIndent := -1
	j := i + 1
	for ; j < len(lines); j++ {
		ind := indent(lines[j])
		if ind < 0 {
			continue
		}
		if helpIndent < 0 {
			if ind <= base {
				break
			}
			helpIndent = ind
		}
		if ind < helpIndent {
			break
		}
	}
	return j - 1
}
