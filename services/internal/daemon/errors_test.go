package daemon

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// TestNoSpaceIsNotInternal: a full session, agent or store is the caller's to fix, with a delete;
// it was a 500 "internal" (session.create on a full store, from the owner change of current/).
func TestNoSpaceIsNotInternal(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EDQUOT, syscall.ENOSPC} {
		err := fmt.Errorf("session.create: hand current/ to the runs' identity: lchown x: %w", errno)
		got := rpcError(err)
		if got.Code != rpc.CodeNoSpace || got.Code.HTTPStatus() != 507 || !strings.Contains(got.Message, "session.delete") {
			t.Errorf("%v → %+v, want no_space (507) naming the deletes that free space", errno, got)
		}
	}
}
