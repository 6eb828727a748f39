package kernel

import (
	"errors"
	"strings"
	"testing"
)

func TestMergeFragmentsConflict(t *testing.T) {
	_, err := MergeFragments([]string{"testdata/fragments/one.conf", "testdata/fragments/two.conf"})
	want := "testdata/fragments/two.conf:2: CONFIG_A requested as n, but testdata/fragments/one.conf:2 requests y: keep one value"
	if err == nil || err.Error() != want {
		t.Fatalf("MergeFragments error = %v, want %q", err, want)
	}
}

func TestMergeFragmentsSameValueTwice(t *testing.T) {
	req, err := MergeFragments([]string{"testdata/fragments/one.conf", "testdata/fragments/one.conf"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(req.Settings()); n != 3 {
		t.Errorf("got %d requests, want 3 (a repeat with the same value is one request)", n)
	}
}

func TestProve(t *testing.T) {
	req, err := MergeFragments([]string{"testdata/fragments/one.conf"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := ReadKconfig("testdata/kconfig", "x86")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		final Config
		allow Allowlist
		want  []string // substrings of the error; none = success
	}{
		{name: "all survive", final: Config{"A": "y", "B": `"text"`}},
		{name: "not-set request satisfied by absence", final: Config{"A": "y", "B": `"text"`, "Z": "y"}},
		{name: "bool lost", final: Config{"B": `"text"`},
			want: []string{"testdata/fragments/one.conf:2: CONFIG_A requested y, final .config has it not set", "1 requested option(s)"}},
		{name: "string changed", final: Config{"A": "y", "B": `"other"`},
			want: []string{`one.conf:3: CONFIG_B requested "text", final .config has "other"`}},
		{name: "off request turned on", final: Config{"A": "y", "B": `"text"`, "C": "y"},
			want: []string{"one.conf:4: CONFIG_C requested n, final .config has y"}},
		{name: "allow-listed", final: Config{"B": `"text"`}, allow: Allowlist{"A": "measured: needs EXPERT"}},
		{name: "stale allow entry", final: Config{"A": "y", "B": `"text"`}, allow: Allowlist{"A": "x"},
			want: []string{"allow-list entry CONFIG_A is stale"}},
		{name: "allow entry nobody requests", final: Config{"A": "y", "B": `"text"`}, allow: Allowlist{"Q": "x"},
			want: []string{"allow-list entry CONFIG_Q names a symbol no fragment requests"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Prove(req, tc.final, tc.allow, k)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Prove: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Prove succeeded, want an error containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestProveExplainsDependency(t *testing.T) {
	req := &Requests{index: map[string]int{"HOTREMOVE": 0}, list: []Setting{{"HOTREMOVE", "y", "pmem.conf", 7}}}
	k, err := ReadKconfig("testdata/kconfig", "x86")
	if err != nil {
		t.Fatal(err)
	}
	err = Prove(req, Config{"X86": "y"}, nil, k)
	var pe *ProofError
	if !errors.As(err, &pe) || len(pe.Unmet) != 1 {
		t.Fatalf("want one unmet request, got %v", err)
	}
	want := "pmem.conf:7: CONFIG_HOTREMOVE requested y, final .config has it not set; unmet depends on: MIGRATION [=n] && X86 [=y]"
	if got := pe.Unmet[0].Error(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestParseAllowlist(t *testing.T) {
	a, err := ParseAllowlist(strings.NewReader("# why\n\nCONFIG_A  needs EXPERT, measured\n"), "allow")
	if err != nil || a["A"] != "needs EXPERT, measured" {
		t.Fatalf("ParseAllowlist = %v, %v", a, err)
	}
	_, err = ParseAllowlist(strings.NewReader("CONFIG_A\nB reason\n"), "allow")
	for _, w := range []string{"allow:1: CONFIG_A has no reason", `allow:2: "B" must start with CONFIG_NAME`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not contain %q", err, w)
		}
	}
}
