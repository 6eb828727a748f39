package daemon

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
)

// maxTokenBytes bounds the token file.
const maxTokenBytes = 4096

// LoadToken reads the host listener's bearer token from path. A missing or empty file yields
// ("", nil): the host provided no token (init writes the file only when the host passed one through
// fw_cfg). A file that group or others may access, that is not a regular file, or whose token is
// not a printable ASCII word is refused.
func LoadToken(path string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("--token-file %s is a %s, not a regular file", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("--token-file %s has mode %#o, so group or others may read it: run chmod 600 %s (and write it with mode 0600)", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	if len(data) > maxTokenBytes {
		return "", fmt.Errorf("--token-file %s is larger than %d bytes: it must hold only the token", path, maxTokenBytes)
	}
	tok := strings.TrimSpace(string(data))
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' {
			return "", fmt.Errorf("--token-file %s: byte %d of the token is not printable ASCII: use a token of letters, digits and punctuation, without spaces", path, i)
		}
	}
	return tok, nil
}

// bearer checks "Authorization: Bearer <token>" in constant time: both sides are hashed first, so
// neither the content nor the length of the token leaks through timing.
type bearer struct{ sum [sha256.Size]byte }

func newBearer(token string) *bearer { return &bearer{sum: sha256.Sum256([]byte(token))} }

func (b *bearer) allows(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	got := sha256.Sum256([]byte(token))
	match := subtle.ConstantTimeCompare(got[:], b.sum[:]) == 1
	return match && ok && strings.EqualFold(scheme, "Bearer")
}
