package evidence

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// oneItem is a snapshot holding the one item k, v.
func oneItem(k, v []byte) *Snapshot {
	return &Snapshot{Domain: "workspace", Point: "A", Items: []Item{{Key: string(k), Value: string(v)}}}
}

// FuzzItemRoundTrip: an item of any bytes, and a note of any bytes, decode to exactly those bytes.
func FuzzItemRoundTrip(f *testing.F) {
	f.Add([]byte("f\xfe"), []byte("file mode=0644 uid=0 gid=0 size=0 sha256=e3b0"))
	f.Add([]byte(`a","b`), []byte("symlink uid=0 gid=0 -> \xff\n"))
	f.Add([]byte("\uFFFD"), []byte(`{"base64":"Zv4="}`))
	f.Add([]byte(""), []byte("\u2028\x00\\"))
	f.Fuzz(func(t *testing.T, k, v []byte) {
		s := oneItem(k, v)
		s.Note, s.Excluded = string(v), []string{string(k)}
		b, err := encodeSnapshot(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeSnapshot(b)
		if err != nil {
			t.Fatalf("decode %q: %v", b, err)
		}
		// Compared field by field: cmp.Diff per input would slow the fuzzer down.
		if len(got.Items) != 1 || got.Items[0] != s.Items[0] || got.Note != s.Note ||
			len(got.Excluded) != 1 || got.Excluded[0] != s.Excluded[0] {
			t.Fatalf("round trip of %q, %q (-want +got):\n%s", k, v, cmp.Diff(s, got))
		}
	})
}

// FuzzItemOneToOne: two different items never encode to the same line.
func FuzzItemOneToOne(f *testing.F) {
	f.Add([]byte("f\xfe"), []byte("v"), []byte("f\xff"), []byte("v"))
	f.Add([]byte("f\uFFFD"), []byte("v"), []byte("f\xfe"), []byte("v"))
	f.Add([]byte(`a","b`), []byte("c"), []byte("a"), []byte(`b","c`))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 []byte) {
		a, err := encodeSnapshot(oneItem(k1, v1))
		if err != nil {
			t.Fatal(err)
		}
		b, err := encodeSnapshot(oneItem(k2, v2))
		if err != nil {
			t.Fatal(err)
		}
		same := bytes.Equal(k1, k2) && bytes.Equal(v1, v2)
		if same != bytes.Equal(a, b) {
			t.Fatalf("items %q=%q and %q=%q encode to\n%s\n%s", k1, v1, k2, v2, a, b)
		}
	})
}

// FuzzDecodeSnapshot: whatever decodes re-encodes to a file that decodes to the same snapshot.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add([]byte("{\"format\":2,\"domain\":\"workspace\",\"point\":\"A\",\"items\":2}\n[\"a\",\"1\"]\n[{\"base64\":\"Zv4=\"},\"2\"]\n"))
	f.Add([]byte("{\"format\":2,\"domain\":\"s\",\"point\":\"B\",\"note\":{\"base64\":\"/w==\"},\"items\":1}\n[\"a\\n\",\"\\u0000\"]\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := decodeSnapshot(in)
		if err != nil {
			return
		}
		b, err := encodeSnapshot(s)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeSnapshot(b)
		if err != nil {
			t.Fatalf("re-decode %q: %v", b, err)
		}
		if diff := cmp.Diff(s, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("re-encode changed the snapshot:\n%s", diff)
		}
	})
}
