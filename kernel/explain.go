package kernel

import (
	"fmt"
	"strings"
)

// Explain says why sym could not take the value want in the final config: its unmet "depends on"
// (including conditions inherited from enclosing if/menu/choice blocks), a prompt that is hidden,
// or — for a request to turn it off — the symbols that select it.
func (k *Kconfig) Explain(sym, want string, final Config) string {
	s, ok := k.syms[sym]
	if !ok || (len(s.depends) == 0 && !s.hasPrompt && len(s.selectedBy) == 0) {
		return "no such symbol in this kernel's Kconfig (renamed or removed?)"
	}
	if want == NotSet {
		var by []string
		for _, sel := range s.selectedBy {
			if evalExpr(sel.by, final) > triN && (sel.cond == "" || evalExpr(sel.cond, final) > triN) {
				by = append(by, fmt.Sprintf("%s [=%s]", sel.by, final.Value(sel.by)))
			}
		}
		if len(by) > 0 {
			return "selected by " + strings.Join(by, ", ")
		}
		if h := k.hiddenPrompt(s, final); h != "" {
			return h + ", so its default applies"
		}
		return "it has no prompt, so its default applies"
	}
	var unmet []string
	for _, d := range s.depends {
		if evalExpr(d, final) == triN {
			unmet = append(unmet, annotate(d, final))
		}
	}
	if len(unmet) > 0 {
		return "unmet depends on: " + strings.Join(unmet, " && ")
	}
	if !s.hasPrompt {
		return "it has no prompt: only a select or its default can set it"
	}
	if h := k.hiddenPrompt(s, final); h != "" {
		return h
	}
	return "its dependencies are met; check the value's type and range"
}

// hiddenPrompt describes the conditions hiding every prompt of s, or "" if one is visible.
func (k *Kconfig) hiddenPrompt(s *symbol, final Config) string {
	var hidden []string
	for _, p := range s.prompts {
		if p == "" || evalExpr(p, final) > triN {
			return ""
		}
		hidden = append(hidden, annotate(p, final))
	}
	if len(hidden) == 0 {
		return ""
	}
	return "its prompt is visible only if " + strings.Join(hidden, " || ")
}
