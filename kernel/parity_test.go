package kernel

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func kataList(t *testing.T, text string) *KataList {
	t.Helper()
	l, err := ParseKataList(strings.NewReader("# kata-version: 9.9.9\n# arch: x86_64\n"+text), "kata.conf")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func parityAllow(t *testing.T, text string) ParityAllowlist {
	t.Helper()
	a, err := ParseParityAllowlist(strings.NewReader(text), "allow")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestProveParity(t *testing.T) {
	kata := kataList(t, "CONFIG_A=y\tcommon/a.conf:1\nCONFIG_B=y\tcommon/b.conf:2\n# CONFIG_C is not set\tx86_64/c.conf:3\nCONFIG_OLD=y\tcommon/a.conf:4\n")
	defined := symbolList{"A": true, "B": true, "C": true}
	tests := []struct {
		name  string
		final Config
		allow string
		want  []string // substrings of the error; none = success
	}{
		{name: "all matched but the absent one", final: Config{"A": "y", "B": "y"},
			allow: "CONFIG_OLD absent: renamed NEW in 6.9\n"},
		{name: "missing", final: Config{"A": "y"}, allow: "CONFIG_OLD absent: gone\n",
			want: []string{`CONFIG_B: Kata requests y (common/b.conf:2), our final .config has it not set: enable it in a kernel/fragments/80-kata-*.conf fragment (with what it depends on), or add "CONFIG_B category: reason" to allow`}},
		{name: "off request turned on", final: Config{"A": "y", "B": "y", "C": "y"}, allow: "CONFIG_OLD absent: gone\n",
			want: []string{"CONFIG_C: Kata requests n (x86_64/c.conf:3), our final .config has y"}},
		{name: "allow-listed", final: Config{"B": "y"}, allow: "CONFIG_A drivers: not needed\nCONFIG_OLD absent: gone\n"},
		{name: "stale: now matched", final: Config{"A": "y", "B": "y"}, allow: "CONFIG_A drivers: not needed\nCONFIG_OLD absent: gone\n",
			want: []string{"allow:1: CONFIG_A is stale: our final .config now has Kata's y (common/a.conf:1); remove the line"}},
		{name: "stale: not Kata's", final: Config{"A": "y", "B": "y"}, allow: "CONFIG_OLD absent: gone\nCONFIG_MINE fs: ours\n",
			want: []string{"allow:2: CONFIG_MINE is not in Kata 9.9.9's list: remove the line"}},
		{name: "false absent claim", final: Config{"A": "y"}, allow: "CONFIG_B absent: gone in 6.12\nCONFIG_OLD absent: gone\n",
			want: []string{"allow:1: CONFIG_B is claimed absent, but this kernel's Kconfig declares it"}},
		{name: "absent not said", final: Config{"A": "y", "B": "y"}, allow: "CONFIG_OLD network: not needed\n",
			want: []string{`allow:1: CONFIG_OLD is not in this kernel's Kconfig: use the category "absent" and name its equivalent`}},
		{name: "absent and unlisted", final: Config{"A": "y", "B": "y"},
			want: []string{"CONFIG_OLD: Kata requests y (common/a.conf:4), our final .config has it not set: it is not in this kernel's Kconfig: enable its equivalent"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ProveParity(kata, tc.final, parityAllow(t, tc.allow), defined, "allow")
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestParityReport(t *testing.T) {
	kata := kataList(t, "CONFIG_A=y\tc/a.conf:1\nCONFIG_B=y\tc/a.conf:2\nCONFIG_C=y\tc/a.conf:3\nCONFIG_D=y\tc/a.conf:4\n")
	rep, err := ProveParity(kata, Config{"A": "y"}, parityAllow(t, "CONFIG_B fs: x\nCONFIG_C fs: y\nCONFIG_D absent: z\n"),
		symbolList{"A": true, "B": true, "C": true}, "allow")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&ParityReport{Kata: "9.9.9 x86_64", Total: 4, Matched: 1, ByCategory: map[string]int{"fs": 2, "absent": 1}}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if want := "Kata 9.9.9 x86_64: 4 symbols, 1 matched, 3 allow-listed (fs 2, absent 1)"; rep.String() != want {
		t.Errorf("String() = %q, want %q", rep, want)
	}
}

func TestParseParityAllowlistErrors(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{"no category", "CONFIG_A not needed\n", `allow:1: CONFIG_A needs "category: reason" after the name`},
		{"empty reason", "CONFIG_A fs:\n", `allow:1: CONFIG_A needs "category: reason"`},
		{"no prefix", "A fs: x\n", `allow:1: "A" must start with CONFIG_NAME`},
		{"twice", "CONFIG_A fs: x\n\nCONFIG_A fs: y\n", "allow:3: CONFIG_A is listed again (first on line 1): keep one line"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseParityAllowlist(strings.NewReader(tc.text), "allow")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
