package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// InstallerPackage is the node installer's command, relative to the module root.
const InstallerPackage = "./deploy/fleet/cmd/allox-deploy"

// BuildInstaller compiles the installer into out as a static, reproducible linux/amd64 binary (no
// cgo, trimmed paths, no build id, no VCS stamp), from the module at moduleRoot.
func BuildInstaller(ctx context.Context, moduleRoot, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", out, InstallerPackage)
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS=-mod=readonly")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", InstallerPackage, err, strings.TrimSpace(string(msg)))
	}
	return nil
}
