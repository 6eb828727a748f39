package evidence

import (
	"fmt"
	"testing"
)

// BenchmarkDecodeSnapshot10k encodes and decodes a workspace snapshot of 10,000 files, the
// verifiers' hot path (go test -run '^$' -bench DecodeSnapshot ./services/internal/effects/evidence/).
func BenchmarkDecodeSnapshot10k(b *testing.B) {
	s := &Snapshot{Domain: "workspace", Point: "A"}
	for i := range 10000 {
		s.Items = append(s.Items, Item{Key: fmt.Sprintf("d%03d/f%05d", i/100, i), Value: "file mode=0644 uid=0 gid=0 size=8 sha256=434728a410a78f56fc1b5899c3593436e61ab0c731e9072d95e96db290205e53"})
	}
	enc, _ := encodeSnapshot(s)
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			encodeSnapshot(s)
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeSnapshot(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
