package lifecycle

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/allox-os/allox/services/internal/memfd"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Program names, in the libexec directory.
const (
	ObserveProgram        = "allox-system-effects-observe"
	VerifyProgram         = "allox-system-effects-verify"
	RecoveryVerifyProgram = "allox-system-effects-recovery-verify"
	RecoverProgram        = "allox-system-effects-recover"
)

// ErrPin marks a program whose content does not match its pin (or that has no pin).
var ErrPin = errors.New("program does not match its sha256 pin")

// Pins maps a program's absolute path to its pinned sha256 (lowercase hex).
type Pins map[string]string

// ReadPins reads a pin file in sha256sum format ("HEX  /path" per line).
func ReadPins(path string) (Pins, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pins: %w (the image's system-effects plugin writes it; check --observer-pins)", err)
	}
	defer f.Close()
	pins := Pins{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, p, ok := strings.Cut(line, "  ")
		if _, err := hex.DecodeString(sum); !ok || err != nil || len(sum) != 64 || !filepath.IsAbs(p) {
			return nil, fmt.Errorf("pins %s:%d: want \"SHA256  /absolute/path\", got %q", path, n, line)
		}
		pins[p] = sum
	}
	return pins, sc.Err()
}

// program is a verified, sealed in-memory copy of a pinned program: what runs is exactly what
// was hashed, whatever happens to the file afterwards.
type program struct {
	name string
	fd   *os.File // memfd, sealed
}

// Path is what to exec; the descriptor stays open until Close.
func (p *program) Path() string { return fmt.Sprintf("/proc/self/fd/%d", p.fd.Fd()) }

// Close releases the in-memory copy.
func (p *program) Close() error { return p.fd.Close() }

// load reads path, checks it against its pin and returns a sealed copy.
func (pins Pins) load(path string) (*program, error) {
	data, err := pins.check(path)
	if err != nil {
		return nil, err
	}
	return seal(path, data)
}

// check reads path and checks it against its pin.
func (pins Pins) check(path string) ([]byte, error) {
	want, ok := pins[path]
	if !ok {
		return nil, fmt.Errorf("%s: %w: it has no pin", path, ErrPin)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != want {
		return nil, fmt.Errorf("%s: %w: sha256 %s, pinned %s", path, ErrPin, got, want)
	}
	return data, nil
}

// seal returns a sealed in-memory copy of data, the checked content of path.
func seal(path string, data []byte) (*program, error) {
	f, err := memfd.Sealed(filepath.Base(path), data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// exec refuses a file that is open for writing (ETXTBSY): keep only a read-only descriptor.
	ro, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_RDONLY|unix.O_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("reopen %s read-only: %w", path, err)
	}
	return &program{name: filepath.Base(path), fd: ro}, nil
}

// checkedPrograms keeps the sealed copy of each pinned program for reuse. Each use stats the file: while
// it is the same file, unchanged (device, inode, size, mtime and ctime, which any write or
// replacement moves), the copy checked earlier runs; otherwise the file is read and checked
// against its pin again, so a program changed or overmounted since is caught at its next use.
// Either way what runs is a copy that matched its pin.
type checkedPrograms struct {
	pins Pins
	mu   sync.Mutex
	m    map[string]cachedProgram
}

type cachedProgram struct {
	id   fileID
	prog *program
}

type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func newCheckedPrograms(pins Pins) *checkedPrograms {
	return &checkedPrograms{pins: pins, m: map[string]cachedProgram{}}
}

// get returns the checked copy of the program at path. The copy belongs to checkedPrograms and stays
// open for the process's life: do not close it. (A file that passes its check again has the
// pinned content, the copy's, so the copy is kept and never replaced while something execs it.)
func (ps *checkedPrograms) get(path string) (*program, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	id := fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	c, ok := ps.m[path]
	if ok && c.id == id {
		return c.prog, nil
	}
	data, err := ps.pins.check(path)
	if err != nil {
		return nil, err
	}
	if !ok {
		if c.prog, err = seal(path, data); err != nil {
			return nil, err
		}
	}
	c.id = id
	ps.m[path] = c
	return c.prog, nil
}
