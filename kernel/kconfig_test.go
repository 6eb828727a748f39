package kernel

import (
	"testing"
)

func TestExplain(t *testing.T) {
	k, err := ReadKconfig("testdata/kconfig", "x86")
	if err != nil {
		t.Fatal(err)
	}
	final := Config{"X86": "y", "BLOCK": "y", "USER": "y", "CRC": "y", "VT": "y"}
	tests := []struct {
		sym, want, why string
	}{
		{"HOTREMOVE", "y", "unmet depends on: MIGRATION [=n] && X86 [=y]"},
		{"ERO", "y", "unmet depends on: MISC [=n]"},
		{"INSIDE", "y", "unmet depends on: FOO [=n]"},
		{"VT", "n", "its prompt is visible only if EXPERT [=n], so its default applies"},
		{"CRC", "n", "selected by USER [=y]"},
		{"CRC", "y", "it has no prompt: only a select or its default can set it"},
		{"NOTHING", "y", "no such symbol in this kernel's Kconfig (renamed or removed?)"},
		{"BLOCK", "y", "its dependencies are met; check the value's type and range"},
	}
	for _, tc := range tests {
		if got := k.Explain(tc.sym, tc.want, final); got != tc.why {
			t.Errorf("Explain(%s=%s) = %q, want %q", tc.sym, tc.want, got, tc.why)
		}
	}
	if s := k.syms["NOPE_SELECTED"]; s == nil || len(s.selectedBy) != 1 || s.selectedBy[0].cond != "EXPERT" {
		t.Errorf("conditional select not recorded with its condition: %+v", s)
	}
}

func TestReadKconfigMissingSource(t *testing.T) {
	if _, err := ReadKconfig("testdata/kconfig", "arm64"); err == nil {
		t.Fatal("a source line naming a missing file must fail")
	}
}

func TestEvalExpr(t *testing.T) {
	c := Config{"A": "y", "B": "m", "N": "42", "S": `"abc"`, "OFF": NotSet}
	tests := []struct {
		expr string
		want int
	}{
		{"A", triY}, {"B", triM}, {"OFF", triN}, {"MISSING", triN},
		{"A && B", triM}, {"OFF || B", triM}, {"!B", triM}, {"!A", triN},
		{"A && (OFF || !MISSING)", triY}, {"N >= 40", triY}, {"N < 0x10", triN},
		{`S = "abc"`, triY}, {"A != y", triN}, {"B = m", triY},
	}
	for _, tc := range tests {
		if got := evalExpr(tc.expr, c); got != tc.want {
			t.Errorf("evalExpr(%q) = %d, want %d", tc.expr, got, tc.want)
		}
	}
}

// Defined tells a declared symbol (also one written "config<TAB>NAME") from one only selected.
func TestDefined(t *testing.T) {
	k, err := ReadKconfig("testdata/kconfig", "x86")
	if err != nil {
		t.Fatal(err)
	}
	for sym, want := range map[string]bool{"CRC": true, "TABBED": true, "NOPE_SELECTED": false, "NOTHING": false} {
		if got := k.Defined(sym); got != want {
			t.Errorf("Defined(%s) = %v, want %v", sym, got, want)
		}
	}
	if why := k.Explain("TABBED", "y", Config{}); why != "unmet depends on: MISC [=n]" {
		t.Errorf("Explain(TABBED) = %q: the depends line after a tab was not read", why)
	}
}
