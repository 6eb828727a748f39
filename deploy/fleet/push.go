package fleet

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry says how to reach a registry.
type Registry struct {
	// Insecure allows plain HTTP (and unverified TLS): a local registry such as localhost:5000.
	Insecure bool
	// Transport replaces the default HTTP transport (tests); nil is http.DefaultTransport.
	Transport http.RoundTripper
}

func (r Registry) parse(ref string) (name.Reference, error) {
	var opts []name.Option
	if r.Insecure {
		opts = append(opts, name.Insecure)
	}
	parsed, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w (e.g. registry.example:5000/allox/allox:0.1.0)", ref, err)
	}
	return parsed, nil
}

func (r Registry) options(ctx context.Context) []remote.Option {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if r.Transport != nil {
		opts = append(opts, remote.WithTransport(r.Transport))
	}
	return opts
}

// Push writes img to ref (a tag or a repository) with the credentials of the standard keychain
// (the docker config: $DOCKER_CONFIG/config.json, credential helpers) and returns the digest-pinned
// reference, repository@sha256:....
func (r Registry) Push(ctx context.Context, img v1.Image, ref string) (string, error) {
	parsed, err := r.parse(ref)
	if err != nil {
		return "", err
	}
	if err := remote.Write(parsed, img, r.options(ctx)...); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return parsed.Context().Digest(d.String()).String(), nil
}

// Pull fetches ref and unpacks its layers into dir, in order, as a container runtime does. Each
// layer is read to its end, so its digest is checked: a registry serving other bytes fails the
// pull, naming the layer. Entries must be directories or regular files with local names.
func (r Registry) Pull(ctx context.Context, ref, dir string) error {
	parsed, err := r.parse(ref)
	if err != nil {
		return err
	}
	img, err := remote.Image(parsed, r.options(ctx)...)
	if err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		if err := unpack(l, dir); err != nil {
			return fmt.Errorf("pull %s: layer %s: %w", ref, d, err)
		}
	}
	return nil
}

// unpack extracts one gzip layer into dir and reads the compressed stream to its end, where
// go-containerregistry compares its digest.
func unpack(l v1.Layer, dir string) (err error) {
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rc.Close()) }()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		return err
	}
	if err := untar(tar.NewReader(zr), dir); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, rc)
	return err
}

func untar(tr *tar.Reader, dir string) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("entry %q: not a local name", h.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = writeEntry(p, tr, os.FileMode(h.Mode).Perm())
		default:
			err = fmt.Errorf("entry %q: type %q is neither a directory nor a regular file", h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

func writeEntry(p string, r io.Reader, mode os.FileMode) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}
