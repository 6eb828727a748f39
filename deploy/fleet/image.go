// Package fleet rolls a build out to a Kubernetes fleet the way Kata's own kata-deploy does: Image
// packs the build output (the payload chosen by deploy/fleet/internal/payload) and the node
// installer (deploy/fleet/cmd/allox-deploy) into a runnable linux/amd64 OCI image, Push publishes
// it to any OCI registry with go-containerregistry (no Docker daemon) and DaemonSet renders the
// manifest whose pod runs the installer on every node. Image is reproducible: the same output
// directory and installer give the same digest.
package fleet

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/allox-os/allox/deploy/fleet/internal/payload"
)

// Where the image holds the installer and the payload. The installer finds the payload at
// PayloadDir unless told otherwise.
const (
	InstallerPath = "/allox-deploy"
	PayloadDir    = "/payload"
)

// Payload is the part of a build output directory that an image carries to the nodes.
type Payload struct {
	// Out is the build output directory (mkimage build -out DIR).
	Out string
	// Files are the payload files, slash-separated relative to Out, sorted.
	Files []string
	// Name and Version are the image spec's (manifest.json's image).
	Name, Version string
	// Epoch is manifest.json's source_date_epoch, the time of every entry.
	Epoch int64
}

// SelectPayload chooses the payload of the build in out and checks each file against its
// manifest.json: an output directory whose files changed after the build is refused, naming them.
func SelectPayload(out string) (*Payload, error) {
	files, m, err := payload.Select(out)
	if err != nil {
		return nil, err
	}
	return &Payload{Out: out, Files: files, Name: m.Image.Name, Version: m.Image.Version, Epoch: m.SourceDateEpoch}, nil
}

// Image builds the OCI image of p with the installer binary (BuildInstaller): one layer for the
// installer, then one layer per payload file (so a new version that leaves the kernel unchanged
// reuses its layer), every entry owned by root with a fixed mode and p.Epoch as its time.
func Image(p *Payload, installer string) (v1.Image, error) {
	epoch := time.Unix(p.Epoch, 0).UTC()
	adds := []mutate.Addendum{}
	add := func(name, file string) error {
		l, err := fileLayer(name, file, epoch)
		if err != nil {
			return err
		}
		adds = append(adds, mutate.Addendum{Layer: l, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "mkimage push: " + name}})
		return nil
	}
	if err := add(InstallerPath, installer); err != nil {
		return nil, err
	}
	for _, f := range p.Files {
		if err := add(path.Join(PayloadDir, f), filepath.Join(p.Out, filepath.FromSlash(f))); err != nil {
			return nil, err
		}
	}
	img, err := mutate.Append(mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1), adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = "amd64", "linux", v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: []string{InstallerPath},
		Cmd:        []string{"install"},
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":       p.Name,
			"org.opencontainers.image.version":     p.Version,
			"org.opencontainers.image.description": "Allox OS " + p.Name + " guest for Kata Containers, with its node installer",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// fileLayer is a layer holding file at name (absolute in the image), with its parent directories.
// The tar is made again each time the layer is read, so a large image is never held in memory.
func fileLayer(name, file string, epoch time.Time) (v1.Layer, error) {
	st, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", file)
	}
	mode := int64(0o644)
	if st.Mode()&0o100 != 0 {
		mode = 0o755
	}
	open := func() (io.ReadCloser, error) {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		pr, pw := io.Pipe()
		go func() {
			defer f.Close()
			pw.CloseWithError(writeTar(pw, strings.TrimPrefix(name, "/"), f, st.Size(), mode, epoch))
		}()
		return pr, nil
	}
	return tarball.LayerFromOpener(open, tarball.WithMediaType(types.OCILayer))
}

// writeTar writes name's parent directories and then name with size bytes from r.
func writeTar(w io.Writer, name string, r io.Reader, size, mode int64, epoch time.Time) error {
	tw := tar.NewWriter(w)
	var dirs []string
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: mode, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if n, err := io.Copy(tw, r); err != nil {
		return err
	} else if n != size {
		return fmt.Errorf("%s: %d bytes, expected %d (it changed while being packed)", name, n, size)
	}
	return tw.Close()
}
