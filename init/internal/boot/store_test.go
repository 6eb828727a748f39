package boot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/allox-os/allox/internal/marker"
	"github.com/google/go-cmp/cmp"
)

var testStore = manifest.Store{Serial: "allox-ws", Mountpoint: "/var/lib/allox/workspaces", Label: "ws", FallbackSizeMiB: 512}

func TestStoreOnFakeRoot(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name    string
		disk    map[int64]string // nil: no disk attached
		size    int64
		calls   []string
		notice  string
		wantErr string
	}{
		{name: "blank disk is formatted", disk: map[int64]string{}, size: 2048 * mib, calls: []string{
			"mkfs /dev/vdb ws mixed=false",
			"mount /dev/vdb /var/lib/allox/workspaces btrfs [noatime] ",
		}},
		{name: "small blank disk gets mixed block groups", disk: map[int64]string{}, size: 300 * mib, calls: []string{
			"mkfs /dev/vdb ws mixed=true",
			"mount /dev/vdb /var/lib/allox/workspaces btrfs [noatime] ",
		}},
		{name: "btrfs disk is mounted", disk: map[int64]string{btrfsMagicOff: btrfsMagic}, size: 300 * mib, calls: []string{
			"mount /dev/vdb /var/lib/allox/workspaces btrfs [noatime] ",
		}},
		{name: "other content is refused", disk: map[int64]string{0x438: "\x53\xef"}, size: 300 * mib,
			wantErr: "/dev/vdb (serial allox-ws) holds an ext2/3/4 filesystem, not Btrfs: refusing to format it; attach a blank disk"},
		{name: "no disk falls back to RAM", calls: []string{
			"loop /run/allox/store.img",
			"mkfs /dev/loop7 ws mixed=true",
			"mount /dev/loop7 /var/lib/allox/workspaces btrfs [noatime] ",
			"release /dev/loop7",
		}, notice: marker.StoreFallback + " serial=allox-ws size_mib=512"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{}
			sys := f.sys(t)
			var notices []string
			sys.Notify = func(n Notice) { notices = append(notices, n.Marker) }
			write(t, sys.Root, "/sys/block/vda/serial", "other")
			if tc.disk != nil {
				write(t, sys.Root, "/sys/block/vdb/serial", "allox-ws\n")
				dev := image(t, tc.size, tc.disk)
				if err := os.MkdirAll(filepath.Join(sys.Root, "dev"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(dev, filepath.Join(sys.Root, "/dev/vdb")); err != nil {
					t.Fatal(err)
				}
			}
			err := Store{testStore}.Run(context.Background(), sys)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Run = %v, want an error containing %q", err, tc.wantErr)
				}
				if len(f.calls) != 0 {
					t.Errorf("a refused disk was touched: %q", f.calls)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.calls, f.calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if got := strings.Join(notices, "\n"); got != tc.notice {
				t.Errorf("notices = %q, want %q", got, tc.notice)
			}
			if tc.disk == nil {
				fi, err := os.Stat(filepath.Join(sys.Root, FallbackImage))
				if err != nil || fi.Size() != 512<<20 {
					t.Errorf("fallback image: %v, %v; want 512 MiB", fi, err)
				}
			}
		})
	}
}

func TestFallbackMiB(t *testing.T) {
	for in, want := range map[int]int{0: 512, -1: 512, 10: 64, 64: 64, 300: 300, 4096: 4096} {
		if got := fallbackMiB(in); got != want {
			t.Errorf("fallbackMiB(%d) = %d, want %d", in, got, want)
		}
	}
}
