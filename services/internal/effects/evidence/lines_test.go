package evidence

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSnapshotLinesRoundTrip encodes snapshots whose keys and values need every kind of escape
// (quotes, backslashes, newlines, tabs, non-ASCII, invalid UTF-8, the separator itself) and
// reads them back equal, byte for byte; each line is valid JSON.
func TestSnapshotLinesRoundTrip(t *testing.T) {
	for _, s := range []*Snapshot{
		{Domain: "workspace", Point: "A", Items: []Item{
			{Key: ".", Value: "dir mode=0755 uid=0 gid=0"},
			{Key: `a","b`, Value: `x"]`},
			{Key: "back\\slash", Value: "ends in \\"},
			{Key: "new\nline\ttab\r", Value: "\x00\x1f"},
			{Key: "ünïcödé ✓", Value: "<&>"},
			{Key: "", Value: ""},
			{Key: "f\xfe", Value: "symlink uid=0 gid=0 -> \xff"},
			{Key: "f\xff", Value: "v"},
			{Key: "f\uFFFD", Value: `{"base64":"Zv4="}`},
		}},
		{Domain: "sysctl", Point: "C", Unconfirmable: "no /proc/sys", Items: []Item{}},
		{Domain: "shared", Point: "B", Unconfirmable: "walk /s/\xfe: EACCES", Note: "n\xff", Excluded: []string{"\xfe"}, Items: []Item{}},
		{Domain: "modules", Point: "B", Note: "no module support", Excluded: []string{"x", "y"}, Items: []Item{}},
	} {
		b, err := encodeSnapshot(s)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			if !json.Valid([]byte(line)) {
				t.Errorf("%s line %d is not JSON: %q", s.Domain, i+1, line)
			}
		}
		got, err := decodeSnapshot(b)
		if err != nil {
			t.Fatalf("decode %s: %v\n%s", s.Domain, err, b)
		}
		if diff := cmp.Diff(s, got); diff != "" {
			t.Errorf("%s round trip (-want +got):\n%s", s.Domain, diff)
		}
	}
	// The one form of a name in invalid UTF-8 is base64: f\xfe and f\xff stay two names.
	b, err := encodeSnapshot(&Snapshot{Domain: "workspace", Point: "A", Items: []Item{{Key: "f\xfe", Value: "v"}, {Key: "f\xff", Value: "v"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "{\"format\":2,\"domain\":\"workspace\",\"point\":\"A\",\"items\":2}\n" +
		"[{\"base64\":\"Zv4=\"},\"v\"]\n[{\"base64\":\"Zv8=\"},\"v\"]\n"
	if string(b) != want {
		t.Errorf("encoded\n%s\nwant\n%s", b, want)
	}
}

// TestSnapshotLinesRefuseDamage names the line of each defect a truncated, extended or edited
// snapshot file has.
func TestSnapshotLinesRefuseDamage(t *testing.T) {
	good := "{\"format\":2,\"domain\":\"workspace\",\"point\":\"A\",\"items\":2}\n[\"a\",\"1\"]\n[\"b\",\"2\"]\n"
	if _, err := decodeSnapshot([]byte(good)); err != nil {
		t.Fatalf("the good file: %v", err)
	}
	for name, c := range map[string]struct{ file, want string }{
		"truncated":     {strings.TrimSuffix(good, "[\"b\",\"2\"]\n"), "1 items, but line 1 announces 2"},
		"extended":      {good + "[\"c\",\"3\"]\n", "line 4: more than the 2 items"},
		"unknown field": {strings.Replace(good, `"items"`, `"extra":1,"items"`, 1), `line 1: json: unknown field "extra"`},
		"three strings": {strings.Replace(good, `["a","1"]`, `["a","1","x"]`, 1), "line 2: an item is one line"},
		"not an array":  {strings.Replace(good, `["a","1"]`, `{"a":"1"}`, 1), "line 2: an item is one line"},
		"raw control":   {strings.Replace(good, `["a","1"]`, "[\"a\",\"1\t\"]", 1), "line 2: an item is one line"},
		"empty line":    {strings.Replace(good, "[\"a\",\"1\"]\n", "\n", 1), "line 2: an item is one line"},
		"negative":      {strings.Replace(good, `"items":2`, `"items":-1`, 1), "line 1: items -1"},
		"no format":     {strings.Replace(good, `"format":2,`, "", 1), "line 1: evidence format not readable: no format"},
		"format 3":      {strings.Replace(good, `"format":2`, `"format":3`, 1), "line 1: evidence format not readable: format 3"},
		"raw bad UTF-8": {strings.Replace(good, `["a","1"]`, "[\"a\xfe\",\"1\"]", 1), "line 2: an item is one line"},
		"lossy escape":  {strings.Replace(good, `["a","1"]`, `["a\ud800","1"]`, 1), "line 2: an item is one line"},
		"base64 UTF-8":  {strings.Replace(good, `["a","1"]`, `[{"base64":"YQ=="},"1"]`, 1), "line 2: an item is one line"},
	} {
		_, err := decodeSnapshot([]byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: decode = %v, want %q", name, err, c.want)
		}
	}
}
