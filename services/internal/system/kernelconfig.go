package system

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// maxKernelConfig bounds the decompressed kernel configuration (a full distribution config is
// about 300 KiB).
const maxKernelConfig = 16 << 20

// KernelConfig returns the running kernel's .config, gunzipped from /proc/config.gz. It fails with
// ErrNoKernelConfig when the kernel was built without CONFIG_IKCONFIG_PROC.
func (s *System) KernelConfig() (string, error) {
	path := filepath.Join(s.ProcDir, "config.gz")
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s is absent: %w", path, ErrNoKernelConfig)
	}
	if err != nil {
		return "", fmt.Errorf("kernel config: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("kernel config %s: %w", path, err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxKernelConfig+1))
	if err != nil {
		return "", fmt.Errorf("kernel config %s: %w", path, err)
	}
	if len(data) > maxKernelConfig {
		return "", fmt.Errorf("kernel config %s: more than %d bytes once decompressed", path, maxKernelConfig)
	}
	return string(data), nil
}
