package kata

import (
	"testing"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		``:             `""`,
		`plain`:        `"plain"`,
		`a"b`:          `"a\"b"`,
		`C:\x`:         `"C:\\x"`,
		"tab\there":    `"tab\there"`,
		"nl\n\r":       `"nl\n\r"`,
		"\x00\x1f\x7f": `"\u0000\u001F\u007F"`,
		"é ü 日本":       `"é ü 日本"`,
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// FuzzQuote checks the encoder against a TOML parser: any valid UTF-8 string comes back unchanged.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", `a"b\c`, "\x00\b\t\n\f\r\x1b\x7f", "日本語", `\u0041`, `"""`, "'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		doc := "k = " + quote(s) + "\n"
		var v struct{ K string }
		if _, err := toml.Decode(doc, &v); err != nil {
			t.Fatalf("quote(%q) = %s does not parse: %v", s, quote(s), err)
		}
		if v.K != s {
			t.Fatalf("quote(%q) parses back as %q", s, v.K)
		}
	})
}
