package lifecycle

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
	fd, err := unix.MemfdCreate(filepath.Base(path), unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd for %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Base(path))
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal %s: %w", path, err)
	}
	// exec refuses a file that is open for writing (ETXTBSY): keep only a read-only descriptor.
	ro, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_RDONLY|unix.O_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("reopen %s read-only: %w", path, err)
	}
	return &program{name: filepath.Base(path), fd: ro}, nil
}
