package seccomp

import (
	"os"

	"github.com/allox-os/allox/services/internal/memfd"
)

// File returns a new sealed memfd holding Program, positioned at its start, for one bwrap:
// pass it in exec.Cmd.ExtraFiles and name its number in the child after --seccomp. bwrap reads
// it to the end, and the offset is shared with the child, so each bwrap needs a File of its
// own. The caller closes it once bwrap has started.
func File() (*os.File, error) {
	prog, err := Program()
	if err != nil {
		return nil, err
	}
	return memfd.Sealed("allox-seccomp", prog)
}
