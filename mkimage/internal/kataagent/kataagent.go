// Package kataagent brings a kata-agent into an image: it takes the agent out of a Kata guest image
// file without mounting it (kata-containers.img: MBR, ext4 partition 1, with or without the NVDIMM
// DAX header, read with go-diskfs; kata-containers-initrd.img: a gzip or zstd compressed newc cpio),
// following symlinks inside the image as the guest's kernel would, and asks a binary for its
// version as `kata-agent --version` prints it.
package kataagent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Path is where Kata's images have the agent.
const Path = "/usr/bin/kata-agent"

// Found says where in a guest image the agent was.
type Found struct {
	Format string // e.g. "MBR disk image, ext4 partition 1 at 3 MiB (behind the NVDIMM DAX header)"
	Path   string // the regular file Path resolved to inside the image, e.g. /usr/bin/kata-agent
}

// ErrNoAgent is wrapped when the image holds no /usr/bin/kata-agent.
var ErrNoAgent = errors.New("no kata-agent in the image")

// maxLinks is the kernel's MAXSYMLINKS.
const maxLinks = 40

// Extract copies Path out of the Kata guest image file at image into dst (mode 0755).
func Extract(image, dst string) (Found, error) {
	f, err := os.Open(image)
	if err != nil {
		return Found{}, err
	}
	defer f.Close()
	head := make([]byte, 512)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return Found{}, fmt.Errorf("%s: %w", image, err)
	}
	head = head[:n]
	var found Found
	switch {
	case bytes.HasPrefix(head, gzipMagic), bytes.HasPrefix(head, zstdMagic), bytes.HasPrefix(head, []byte("07070")):
		found, err = fromInitrd(f, dst)
	case n == 512 && head[510] == 0x55 && head[511] == 0xaa:
		f.Close()
		found, err = fromDisk(image, dst)
	default:
		err = errors.New("neither a disk image with an MBR (kata-containers.img) nor a gzip, zstd or plain newc cpio (kata-containers-initrd.img)")
	}
	if err != nil {
		return Found{}, fmt.Errorf("%s: %w", image, err)
	}
	return found, nil
}

// writeAgent writes the agent's bytes to dst as an executable.
func writeAgent(dst string, r io.Reader) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close(), os.Chmod(dst, 0o755))
}

// VersionTimeout bounds `kata-agent --version`.
const VersionTimeout = 10 * time.Second

// Version runs `bin --version` (empty environment, stdin /dev/null, cwd /) and returns the first
// line it prints, e.g. "kata-agent version 3.x.y (api version: ..., commit version: ..., type:
// rust, ...)". A binary that cannot run on the build host, fails or prints nothing is an error:
// the version is what the manifest and the SBOM record.
func Version(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, VersionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env, cmd.Dir = []string{}, "/"
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("kata-agent --version did not finish in %v", VersionTimeout)
	case err != nil:
		return "", fmt.Errorf("kata-agent --version: %w%s", err, firstLine(" (", errOut.String(), ")"))
	}
	v := firstLine("", out.String(), "")
	if v == "" {
		return "", errors.New("kata-agent --version printed nothing on stdout; is it a kata-agent?")
	}
	return v, nil
}

// ShortVersion is the version number in a line of the real agent's form, "kata-agent version
// 3.2.0 (api version: ...)", or the whole line when it has another form.
func ShortVersion(line string) string {
	if rest, ok := strings.CutPrefix(line, "kata-agent version "); ok {
		if f := strings.Fields(rest); len(f) > 0 {
			return f[0]
		}
	}
	return line
}

func firstLine(pre, s, post string) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			return pre + l + post
		}
	}
	return ""
}
