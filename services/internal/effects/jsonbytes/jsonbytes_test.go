package jsonbytes

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestForms(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", `""`},
		{"f", `"f"`},
		{"f\xfe", `{"base64":"Zv4="}`},
		{"f\xff", `{"base64":"Zv8="}`},
		{"f\uFFFD", "\"f\uFFFD\""},
		{"a\"b\\c\n\t\x01\x7f<>&", `"a\"b\\c\n\t\u0001` + "\x7f" + `<>&"`},
		{"\u2028\u2029é", `"\u2028\u2029é"`},
		{"\xed\xa0\x80", `{"base64":"7aCA"}`}, // a surrogate half is not valid UTF-8
	} {
		got := Append(nil, c.in)
		if string(got) != c.want {
			t.Errorf("Append(%q) = %s, want %s", c.in, got, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("Append(%q) = %s is not JSON", c.in, got)
		}
		if utf8.ValidString(c.in) && string(got) != stdString(t, c.in) {
			t.Errorf("Append(%q) = %s, encoding/json writes %s", c.in, got, stdString(t, c.in))
		}
		back, err := Decode(got)
		if err != nil || back != c.in {
			t.Errorf("Decode(%s) = %q, %v; want %q", got, back, err, c.in)
		}
	}
}

// TestDecodeReadsAnySpelling: other JSON spellings of a form (json.Marshal escapes <, > and &,
// json.MarshalIndent indents objects) read as the same byte string.
func TestDecodeReadsAnySpelling(t *testing.T) {
	for in, want := range map[string]string{
		`"\u0066"`:                     "f",
		`"\/"`:                         "/",
		`"\u001F"`:                     "\x1f",
		"\"\u2028\"":                   "\u2028",
		`"\u003c\u0026"`:               "<&",
		`"\ud83d\ude00"`:               "\U0001F600",
		"{\n  \"base64\": \"Zv4=\"\n}": "f\xfe",
		` "a" `:                        "a",
	} {
		if got, err := Decode([]byte(in)); err != nil || got != want {
			t.Errorf("Decode(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestDecodeRefusesLoss: what encoding/json would read lossily, or what is not the form of any
// byte string, is refused.
func TestDecodeRefusesLoss(t *testing.T) {
	for _, in := range []string{
		`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800x"`, `"\udc00\ud800"`, // read as U+FFFD
		"\"f\xfe\"",         // raw invalid UTF-8, read as U+FFFD
		`{"base64":"Zg=="}`, // "f" is valid UTF-8: its form is "f"
		`{"base64":"Zv4"}`,  // no padding
		`{"base64":"Zv5="}`, // non-zero trailing bits
		`{"base64":"Zv4=","x":1}`,
		`{"base64":"Zv4=","base64":"Zv8="}`,
		`{"base64":1}`,
		`{"base64":""}`,
		`{}`, `null`, `1`, `[]`, `"`, ``, `"a" "b"`,
	} {
		if s, err := Decode([]byte(in)); !errors.Is(err, ErrForm) {
			t.Errorf("Decode(%s) = %q, %v; want ErrForm", in, s, err)
		}
	}
}

// TestStringInStruct: String fields go through encoding/json in the same form.
func TestStringInStruct(t *testing.T) {
	type rec struct {
		Name  String            `json:"name,omitempty"`
		Names map[string]String `json:"names,omitempty"`
	}
	in := rec{Name: "f\xfe", Names: map[string]String{"a": "f\xff", "b": "ok"}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"name":{"base64":"Zv4="},"names":{"a":{"base64":"Zv8="},"b":"ok"}}`; string(b) != want {
		t.Errorf("json.Marshal = %s, want %s", b, want)
	}
	var out rec
	if err := json.Unmarshal(b, &out); err != nil || out.Name != in.Name || out.Names["a"] != in.Names["a"] {
		t.Errorf("json.Unmarshal = %+v, %v; want %+v", out, err, in)
	}
}

// FuzzRoundTrip: Decode(Append(b)) == b for every byte string, and the form is JSON.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "f\xfe", "f\xff", "\uFFFD", "a\"\\\n\x00", "\u2028", "\xed\xa0\x80", "é\xc3"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		form := Append(nil, string(b))
		if !json.Valid(form) {
			t.Fatalf("Append(%q) = %s is not JSON", b, form)
		}
		got, err := Decode(form)
		if err != nil || got != string(b) {
			t.Fatalf("Decode(Append(%q)) = %q, %v", b, got, err)
		}
		if utf8.Valid(b) && string(form) != stdString(t, string(b)) {
			t.Fatalf("Append(%q) = %s, encoding/json writes %s", b, form, stdString(t, string(b)))
		}
	})
}

// FuzzOneToOne: two different byte strings never share a form.
func FuzzOneToOne(f *testing.F) {
	f.Add([]byte("f\xfe"), []byte("f\xff"))
	f.Add([]byte("f\uFFFD"), []byte("f\xfe"))
	f.Add([]byte(`{"base64":"Zv4="}`), []byte("f\xfe"))
	f.Add([]byte(`"a"`), []byte("a"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		fa, fb := Append(nil, string(a)), Append(nil, string(b))
		if bytes.Equal(a, b) != bytes.Equal(fa, fb) {
			t.Fatalf("%q → %s, %q → %s", a, fa, b, fb)
		}
	})
}

// FuzzDecode: whatever Decode accepts is read as encoding/json reads it, and its form reads back
// the same.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`"f"`, `{"base64":"Zv4="}`, `"\u0066"`, `"\ud800"`, `"\ud83d\ude00"`, `{"base64":"Zg=="}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := Decode(in)
		if err != nil {
			return
		}
		var std string
		if json.Unmarshal(in, &std) == nil && std != s {
			t.Fatalf("Decode(%s) = %q, encoding/json reads %q", in, s, std)
		}
		if again, err := Decode(Append(nil, s)); err != nil || again != s {
			t.Fatalf("Decode(Append(%q)) = %q, %v", s, again, err)
		}
	})
}

// stdString is what encoding/json writes for s with HTML escaping off.
func stdString(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}
