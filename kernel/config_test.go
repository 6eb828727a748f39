package kernel

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseConfig(t *testing.T) {
	in := "# comment\n\nCONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=n\nCONFIG_S=\"x y\"\nCONFIG_N=0x10\n"
	got, err := ParseConfig(strings.NewReader(in), "f")
	if err != nil {
		t.Fatal(err)
	}
	want := []Setting{
		{"A", "y", "f", 3}, {"B", NotSet, "f", 4}, {"C", NotSet, "f", 5},
		{"S", `"x y"`, "f", 6}, {"N", "0x10", "f", 7},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseConfig (-want +got):\n%s", d)
	}
	var buf bytes.Buffer
	if err := Render(&buf, got); err != nil {
		t.Fatal(err)
	}
	wantText := "CONFIG_A=y\n# CONFIG_B is not set\n# CONFIG_C is not set\nCONFIG_N=0x10\nCONFIG_S=\"x y\"\n"
	if buf.String() != wantText {
		t.Errorf("Render = %q, want %q", buf.String(), wantText)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for in, want := range map[string]string{
		"CONFIG_A=y\nA=y\n": `f:2: "A=y" is not a config line`,
		"CONFIG_A=\n":       "f:1: CONFIG_A has an empty value (write CONFIG_A=n to turn it off)",
		"CONFIG_S=\"open\n": "f:1: CONFIG_S: unterminated string",
		"CONFIG_X-Y=y\n":    `f:1: "CONFIG_X-Y=y" is not a config line`,
	} {
		_, err := ParseConfig(strings.NewReader(in), "f")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig(%q) error = %v, want it to contain %q", in, err, want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add("CONFIG_A=y\n# CONFIG_B is not set\n")
	f.Add("CONFIG_S=\"\\\"\"\n")
	f.Fuzz(func(t *testing.T, in string) {
		settings, err := ParseConfig(strings.NewReader(in), "fuzz")
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := Render(&buf, settings); err != nil {
			t.Fatal(err)
		}
		again, err := ParseConfig(&buf, "fuzz")
		if err != nil {
			t.Fatalf("rendered config does not parse: %v\n%s", err, buf.String())
		}
		if d := cmp.Diff(ConfigOf(settings), ConfigOf(again)); d != "" {
			t.Fatalf("render/parse round trip changed values:\n%s", d)
		}
	})
}
