package memfd

import (
	"io"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSealedHoldsDataAndRefusesChanges(t *testing.T) {
	f, err := Sealed("test", []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, err := io.ReadAll(f); err != nil || string(b) != "payload" {
		t.Fatalf("read %q, %v; want the data from the start", b, err)
	}
	if _, err := f.WriteAt([]byte("X"), 0); err == nil {
		t.Error("a write to the sealed file succeeded")
	}
	if err := f.Truncate(0); err == nil {
		t.Error("shrinking the sealed file succeeded")
	}
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if want := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE; err != nil || seals&want != want {
		t.Errorf("seals %#x, %v; want %#x", seals, err, want)
	}
}
