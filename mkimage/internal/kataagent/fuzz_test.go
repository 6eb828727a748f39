package kataagent

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cavaliergopher/cpio"
)

// FuzzExtract feeds arbitrary bytes as a guest image: Extract must return an error or an agent,
// never panic or loop (a Kata image is outside input).
func FuzzExtract(f *testing.F) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	w := cpio.NewWriter(zw)
	w.WriteHeader(&cpio.Header{Name: "usr/bin/kata-agent", Mode: cpio.TypeSymlink | 0o777, Linkname: "kata-agent", Size: 10})
	w.Write([]byte("kata-agent")) // a symlink to itself
	w.WriteHeader(&cpio.Header{Name: "usr/bin/x", Mode: cpio.TypeReg | 0o755, Size: 1})
	w.Write([]byte("x"))
	w.Close()
	zw.Close()
	f.Add(buf.Bytes())
	mbr := make([]byte, 4096)
	mbr[510], mbr[511] = 0x55, 0xaa
	mbr[446+4], mbr[446+8], mbr[446+12] = 0x83, 1, 4 // partition 1: sectors 1..4
	f.Add(mbr)
	f.Add([]byte("070701"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		img := filepath.Join(dir, "img")
		if err := os.WriteFile(img, data, 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Extract(img, filepath.Join(dir, "agent"))
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Extract still runs after 5 s on %d bytes", len(data))
		}
	})
}
