// Package jsonbytes writes byte strings as JSON values one-to-one, so that
// the observer's evidence and history keep every byte of the file names,
// symlink targets, process names and paths they record.
//
// The form of a byte string s:
//
//   - s is valid UTF-8: a JSON string, escaped as encoding/json escapes it
//     with HTML escaping off (\", \\, \b, \f, \n, \r, \t, other control
//     characters as \u00xx, U+2028 and U+2029 as \u2028 and \u2029;
//     everything else as it is). Any JSON reader reads s back.
//   - otherwise: a JSON object with one member, {"base64":"…"}, s in
//     standard base64 with padding (RFC 4648 §4). A string and an object
//     never collide, so two byte strings never share a form.
//
// Decode reads any JSON spelling of these values (e.g. what json.Marshal
// or json.MarshalIndent write for a String), but refuses every value that
// encoding/json would read lossily or that is not the form of any byte
// string: raw invalid UTF-8 or an unpaired surrogate escape inside a
// string (both read as U+FFFD), an object with another member, a member
// twice, non-canonical base64, and base64 of valid UTF-8 (which has the
// string form).
package jsonbytes

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrForm marks a JSON value that is not the one form of a byte string.
var ErrForm = errors.New("not a byte string in its one form")

const (
	objectStart = `{"base64":"`
	objectEnd   = `"}`
	hexDigits   = "0123456789abcdef"
)

var b64 = base64.StdEncoding.Strict()

// String is a byte string that encodes to and decodes from JSON in the one
// form of this package, e.g. as a field of a struct encoding/json handles.
type String string

// MarshalJSON returns the form of s.
func (s String) MarshalJSON() ([]byte, error) { return Append(nil, string(s)), nil }

// UnmarshalJSON decodes the form of a byte string.
func (s *String) UnmarshalJSON(b []byte) error {
	v, err := Decode(b)
	if err != nil {
		return err
	}
	*s = String(v)
	return nil
}

// Append appends the form of s to b.
func Append(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		b = append(b, objectStart...)
		b = b64.AppendEncode(b, []byte(s))
		return append(b, objectEnd...)
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == 0xe2 && i+2 < len(s) && s[i+1] == 0x80 && s[i+2]&^1 == 0xa8 { // U+2028, U+2029
			b = append(append(b, s[start:i]...), `\u202`...)
			b = append(b, hexDigits[8+s[i+2]&1])
			i += 2
			start = i + 1
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Decode returns the byte string whose form b is.
func Decode(b []byte) (string, error) {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '"':
		if !utf8.Valid(b) {
			return "", fmt.Errorf("%w: invalid UTF-8 inside a JSON string (its form is base64)", ErrForm)
		}
		if err := pairedSurrogates(b); err != nil {
			return "", err
		}
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return "", fmt.Errorf("%w: %w", ErrForm, err)
		}
		return s, nil
	case len(b) > 0 && b[0] == '{':
		enc, err := base64Member(b)
		if err != nil {
			return "", err
		}
		v, err := b64.DecodeString(enc)
		if err != nil {
			return "", fmt.Errorf("%w: base64: %w", ErrForm, err)
		}
		if utf8.Valid(v) {
			return "", fmt.Errorf("%w: base64 of valid UTF-8 (its form is a JSON string)", ErrForm)
		}
		return string(v), nil
	}
	return "", fmt.Errorf("%w: %.40q is neither a JSON string nor {\"base64\":\"…\"}", ErrForm, b)
}

// base64Member returns the value of the one member "base64" of the JSON object b.
func base64Member(b []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var toks []json.Token
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrForm, err)
		}
		if toks = append(toks, tok); len(toks) > 4 {
			break
		}
	}
	if len(toks) == 4 && toks[0] == json.Delim('{') && toks[1] == "base64" && toks[3] == json.Delim('}') {
		if s, ok := toks[2].(string); ok {
			return s, nil
		}
	}
	return "", fmt.Errorf("%w: an object must be {\"base64\":\"…\"} alone", ErrForm)
}

// pairedSurrogates refuses a JSON string (valid UTF-8) with a \u escape of a UTF-16 surrogate
// that is not the first of a pair followed by the second, which encoding/json reads as U+FFFD.
func pairedSurrogates(b []byte) error {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		i++
		if b[i] != 'u' {
			continue
		}
		r, ok := hex4(b, i+1)
		switch {
		case !ok || !utf16.IsSurrogate(r):
		case r < 0xdc00 && i+6 < len(b) && b[i+5] == '\\' && b[i+6] == 'u':
			if r2, ok := hex4(b, i+7); ok && utf16.DecodeRune(r, r2) != utf8.RuneError {
				i += 6
				continue
			}
			fallthrough
		default:
			return fmt.Errorf("%w: an unpaired surrogate escape \\u%04x (read as U+FFFD)", ErrForm, r)
		}
	}
	return nil
}

// hex4 parses the four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return rune(n), err == nil
}
