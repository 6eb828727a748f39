package qemutests

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// needTool stops the test when a host tool is missing.
func needTool(tb testing.TB, name, install string) {
	tb.Helper()
	if _, err := exec.LookPath(name); err != nil {
		unavailable(tb, "%s not found: %s", name, install)
	}
}

// filesystem is what blkid(8) reads from the start of a disk image.
type filesystem struct{ Type, UUID string }

func diskFilesystem(t *testing.T, disk string) filesystem {
	t.Helper()
	tag := func(name string) string {
		// -p probes the device itself; the blkid cache could answer for a file from an old run.
		out, err := exec.Command("blkid", "-p", "-o", "value", "-s", name, disk).Output()
		if err != nil && len(out) == 0 {
			return "" // blkid exits 2 when it finds nothing
		}
		return strings.TrimSpace(string(out))
	}
	return filesystem{Type: tag("TYPE"), UUID: tag("UUID")}
}

// The first 64 KiB of a whole-disk Btrfs are never used by the filesystem, and mkfs.btrfs zeroes
// them; a canary there survives a reboot but not a reformat.
const canaryOffset = 32 << 10

var canary = []byte("allox-qemu-tests: store must survive reboot")

func writeCanary(t *testing.T, disk string) {
	t.Helper()
	f, err := os.OpenFile(disk, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(canary, canaryOffset); err != nil {
		t.Fatal(err)
	}
}

func checkCanary(t *testing.T, disk string) {
	t.Helper()
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(canary))
	if _, err := f.ReadAt(got, canaryOffset); err != nil || !bytes.Equal(got, canary) {
		t.Errorf("bytes written at offset %d between the boots are gone (%q, %v): the store was reformatted", canaryOffset, got, err)
	}
}
