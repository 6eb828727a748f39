package kernel

import (
	"strconv"
	"strings"
	"unicode"
)

// tristate values: n < m < y.
const (
	triN = 0
	triM = 1
	triY = 2
)

// evalExpr evaluates a Kconfig dependency expression against a final config, as Kconfig does:
// tristate logic, with = != < > <= >= comparisons. Unknown symbols are n.
func evalExpr(expr string, c Config) int {
	p := &exprParser{toks: tokenize(expr), c: c}
	v := p.or()
	return v
}

// annotate renders an expression with each symbol's value, as menuconfig's help does:
// "MEMORY_HOTPLUG [=y] && MIGRATION [=n]".
func annotate(expr string, c Config) string {
	var b strings.Builder
	for i, t := range tokenize(expr) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t)
		if isSymbol(t) {
			b.WriteString(" [=" + c.Value(t) + "]")
		}
	}
	return b.String()
}

func isSymbol(t string) bool {
	if t == "y" || t == "m" || t == "n" || t == "" {
		return false
	}
	r := rune(t[0])
	return unicode.IsUpper(r) || r == '_' || (unicode.IsDigit(r) && strings.ContainsAny(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_"))
}

func tokenize(s string) []string {
	var toks []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case strings.HasPrefix(s[i:], "&&"), strings.HasPrefix(s[i:], "||"),
			strings.HasPrefix(s[i:], "!="), strings.HasPrefix(s[i:], "<="), strings.HasPrefix(s[i:], ">="):
			toks = append(toks, s[i:i+2])
			i += 2
		case strings.ContainsRune("()!=<>", rune(c)):
			toks = append(toks, s[i:i+1])
			i++
		case c == '"' || c == '\'':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				j = len(s) - i - 1
			}
			toks = append(toks, s[i:i+j+2])
			i += j + 2
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t()!=<>&|\"'", rune(s[j])) {
				j++
			}
			if j == i {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		}
	}
	return toks
}

type exprParser struct {
	toks []string
	pos  int
	c    Config
}

func (p *exprParser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *exprParser) next() string { t := p.peek(); p.pos++; return t }

func (p *exprParser) or() int {
	v := p.and()
	for p.peek() == "||" {
		p.next()
		v = max(v, p.and())
	}
	return v
}

func (p *exprParser) and() int {
	v := p.not()
	for p.peek() == "&&" {
		p.next()
		v = min(v, p.not())
	}
	return v
}

func (p *exprParser) not() int {
	if p.peek() == "!" {
		p.next()
		return triY - p.not()
	}
	return p.primary()
}

func (p *exprParser) primary() int {
	t := p.next()
	if t == "(" {
		v := p.or()
		if p.peek() == ")" {
			p.next()
		}
		return v
	}
	switch op := p.peek(); op {
	case "=", "!=", "<", ">", "<=", ">=":
		p.next()
		return compare(p.value(t), op, p.value(p.next()))
	}
	return tri(p.value(t))
}

// value is a token's value: a constant, a quoted string, or a symbol's value in the config.
func (p *exprParser) value(t string) string {
	switch {
	case t == "y" || t == "m" || t == "n":
		return t
	case strings.HasPrefix(t, `"`) || strings.HasPrefix(t, "'"):
		return strings.Trim(t, `"'`)
	case isSymbol(t):
		return strings.Trim(p.c.Value(t), `"`)
	}
	return t
}

func tri(v string) int {
	switch v {
	case "y":
		return triY
	case "m":
		return triM
	}
	return triN
}

func compare(a, op, b string) int {
	cmp := strings.Compare(a, b)
	if x, err1 := strconv.ParseInt(a, 0, 64); err1 == nil {
		if y, err2 := strconv.ParseInt(b, 0, 64); err2 == nil {
			cmp = 0
			if x < y {
				cmp = -1
			} else if x > y {
				cmp = 1
			}
		}
	}
	ok := map[string]bool{"=": cmp == 0, "!=": cmp != 0, "<": cmp < 0, ">": cmp > 0, "<=": cmp <= 0, ">=": cmp >= 0}[op]
	if ok {
		return triY
	}
	return triN
}
