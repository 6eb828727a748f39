package kernel

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const kataFixture = "testdata/kata/tools/packaging/kernel/configs/fragments"

// The fixture has a common file tagged !x86_64 (left out), an x86_64 file that overrides a common
// symbol (later wins), an "is not set" line (n) and a confidential sub-directory (never read).
func TestReadKataFragments(t *testing.T) {
	l, err := ReadKataFragments(kataFixture, "9.9.9", "x86_64")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"common/base.conf", "x86_64/base.conf"}, l.Selection); diff != "" {
		t.Errorf("selection (-want +got):\n%s", diff)
	}
	var got []string
	for _, s := range l.Settings {
		got = append(got, s.String()+" "+s.Where())
	}
	want := []string{
		"CONFIG_A=y common/base.conf:2",
		"# CONFIG_B is not set x86_64/base.conf:1",
		"# CONFIG_C is not set common/base.conf:4",
		"CONFIG_N=240 x86_64/base.conf:2",
		`CONFIG_S="x y" x86_64/base.conf:3`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("settings (-want +got):\n%s", diff)
	}
}

func TestKataListRoundTrip(t *testing.T) {
	l, err := ReadKataFragments(kataFixture, "9.9.9", "x86_64")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteKataList(&buf, l, "go run ./kernel/cmd/kata-fragments"); err != nil {
		t.Fatal(err)
	}
	back, err := ParseKataList(bytes.NewReader(buf.Bytes()), "list")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(l, back, cmp.AllowUnexported(KataList{})); diff != "" {
		t.Errorf("round trip (-wrote +read):\n%s", diff)
	}
}

func TestParseKataListErrors(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{"no source", "# kata-version: 1\nCONFIG_A=y\n", `list:2: "CONFIG_A=y" must be CONFIG_NAME=value, a tab, and the Kata fragment file:line`},
		{"twice", "# kata-version: 1\nCONFIG_A=y\tc/a.conf:1\nCONFIG_A=n\tc/b.conf:2\n", "list:3: CONFIG_A is listed twice"},
		{"no version", "CONFIG_A=y\tc/a.conf:1\n", `no "# kata-version:" header line`},
		{"empty", "# kata-version: 1\n", "lists no symbol"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKataList(strings.NewReader(tc.text), "list")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// The committed list parses, names its Kata version and selection, and every symbol comes from a
// selected fragment.
func TestCommittedKataList(t *testing.T) {
	paths, _ := filepath.Glob("kata/kata-*.conf")
	if len(paths) == 0 {
		t.Fatal("no kernel/kata/kata-*.conf: run make kata-fragments")
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ParseKataList(f, p)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if name := "kata-" + l.Version + "-" + l.Arch + ".conf"; filepath.Base(p) != name {
			t.Errorf("%s holds Kata %s %s: name it %s", p, l.Version, l.Arch, name)
		}
		sel := map[string]bool{}
		for _, s := range l.Selection {
			sel[s] = true
		}
		for _, s := range l.Settings {
			if !sel[s.File] {
				t.Errorf("%s: CONFIG_%s comes from %s, which is not in the selection", p, s.Symbol, s.File)
			}
		}
	}
}

// Whatever list parses writes back to a list that parses to the same symbols.
func FuzzParseKataList(f *testing.F) {
	f.Add("# kata-version: 4.1.0\n# arch: x86_64\n# fragment: common/a.conf\nCONFIG_A=y\tcommon/a.conf:1\n# CONFIG_B is not set\tcommon/a.conf:2\n")
	f.Add("# kata-version: 1\nCONFIG_S=\"a\tb\"\tx/y.conf:3\n")
	f.Fuzz(func(t *testing.T, text string) {
		l, err := ParseKataList(strings.NewReader(text), "fuzz")
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteKataList(&buf, l, "fuzz"); err != nil {
			t.Fatal(err)
		}
		back, err := ParseKataList(&buf, "again")
		if err != nil {
			t.Fatalf("a list that parsed does not parse once written: %v\n%s", err, buf.String())
		}
		if diff := cmp.Diff(l.Settings, back.Settings); diff != "" {
			t.Errorf("settings changed in the round trip (-first +second):\n%s", diff)
		}
	})
}
