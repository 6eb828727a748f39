package kata

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBlockDriverKernelSymbols(t *testing.T) {
	for _, tc := range []struct {
		driver string
		want   []string
	}{
		{"", []string{"SCSI", "SCSI_VIRTIO", "BLK_DEV_SD"}}, // Kata's default is virtio-scsi
		{"virtio-scsi", []string{"SCSI", "SCSI_VIRTIO", "BLK_DEV_SD"}},
		{"virtio-blk", []string{"VIRTIO_BLK"}},
	} {
		got, err := BlockDriverKernelSymbols(tc.driver)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("BlockDriverKernelSymbols(%q) (-want +got):\n%s", tc.driver, diff)
		}
	}
	if _, err := BlockDriverKernelSymbols("nvdimm"); err == nil || !strings.Contains(err.Error(), `use "virtio-scsi"`) {
		t.Errorf("nvdimm: error %v, want one naming the supported drivers", err)
	}
}
