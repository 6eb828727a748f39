package tracked

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// idGen makes run ids: a fixed-width hex timestamp (so ids sort by start
// time) and 4 random bytes, e.g. "r18c2f1a0b3e4d5f6-9a1b2c3d". The timestamp
// is strictly increasing within one process.
type idGen struct {
	mu   sync.Mutex
	last int64
}

func (g *idGen) next() string {
	g.mu.Lock()
	n := time.Now().UnixNano()
	if n <= g.last {
		n = g.last + 1
	}
	g.last = n
	g.mu.Unlock()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("r%016x-%s", n, hex.EncodeToString(b[:]))
}

// validRunID reports whether name can be a run directory's name.
func validRunID(name string) bool { return len(name) > 1 && name[0] == 'r' && validID(name) }
