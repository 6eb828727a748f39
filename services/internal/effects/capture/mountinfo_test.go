package capture

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/services/internal/effects/evidence"
)

func TestParseMountinfo(t *testing.T) {
	const in = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
35 22 0:30 / /tmp rw,nosuid shared:14 master:2 - tmpfs tmpfs rw,size=1024k
41 35 0:31 / /tmp rw - tmpfs other rw
`
	got, err := ParseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []evidence.Item{
		{Key: "/", Value: "fstype=ext4 source=/dev/vda root=/ opts=rw,relatime super=rw propagation=shared"},
		{Key: "/tmp", Value: "fstype=tmpfs source=tmpfs root=/ opts=rw,nosuid super=rw,size=1024k propagation=shared,master"},
		{Key: "/tmp #2", Value: "fstype=tmpfs source=other root=/ opts=rw super=rw propagation=private"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("items (-want +got):\n%s", diff)
	}
	if _, err := ParseMountinfo(strings.NewReader("22 1 0:21 / / rw\n")); err == nil {
		t.Error("a line without the \" - \" separator was accepted")
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add("22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw\n")
	f.Fuzz(func(t *testing.T, in string) {
		items, err := ParseMountinfo(strings.NewReader(in))
		if err != nil {
			return
		}
		s := &evidence.Snapshot{Domain: "mounts", Items: items}
		if err := s.Canonicalize(); err != nil {
			t.Fatalf("parsed mountinfo has duplicate keys: %v", err)
		}
	})
}
