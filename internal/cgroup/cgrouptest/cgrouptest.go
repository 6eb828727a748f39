// Package cgrouptest makes cgroups on the real cgroup2 hierarchy for tests and removes them
// (killing what is left in them) when the test ends.
package cgrouptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/cgroup"
	"github.com/allox-os/allox/internal/testenv"
)

// New makes a fresh group <prefix>-<random> below the root of the cgroup2 mount, removed with
// everything below it when the test ends, and returns its directory. It needs root.
func New(tb testing.TB, prefix string) string {
	tb.Helper()
	mount, err := cgroup.DetectMount()
	if err != nil {
		testenv.Unavailable(tb, "needs cgroup v2: %v", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	path := "/" + prefix + "-" + hex.EncodeToString(b[:])
	if _, err := cgroup.Create(mount, path, cgroup.Limits{}); err != nil {
		tb.Fatal(err)
	}
	dir := filepath.Join(mount, path)
	RemoveAtEnd(tb, dir)
	return dir
}

// RemoveAtEnd kills everything in the group at dir and below it and removes the groups when the
// test ends; a group that is gone by then is no error.
func RemoveAtEnd(tb testing.TB, dir string) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		g, err := cgroup.At(dir)
		if err == nil {
			err = g.DeleteTree(ctx)
		}
		if err != nil {
			tb.Errorf("cgroup %s left behind: %v", dir, err)
		}
	})
}
