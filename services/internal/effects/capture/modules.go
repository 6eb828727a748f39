package capture

import (
	"bufio"
	"errors"
	"os"
	"strings"

	"github.com/allox-os/allox/services/internal/effects/evidence"
)

// NoModuleSupport is the note of a modules snapshot on a kernel built
// without module support.
const NoModuleSupport = "no module support (no /proc/modules): nothing can be loaded"

// Modules captures the loaded modules from path (normally /proc/modules):
// names and states. Sizes, reference counts and users change as other
// modules come and go and are not recorded.
func Modules(path string) *evidence.Snapshot {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return &evidence.Snapshot{Note: NoModuleSupport}
	}
	if err != nil {
		return unconfirmed(err.Error())
	}
	defer f.Close()
	s := &evidence.Snapshot{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			return unconfirmed(path + ": malformed line " + sc.Text())
		}
		s.Items = append(s.Items, evidence.Item{Key: fields[0], Value: "state=" + fields[4]})
	}
	if err := sc.Err(); err != nil {
		return unconfirmed(err.Error())
	}
	return s
}
