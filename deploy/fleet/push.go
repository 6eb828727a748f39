package fleet

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
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

// Pull fetches ref and returns its flattened filesystem as a tar stream, as a container runtime
// unpacks it: every layer's digest is checked as it is read, so a changed blob fails the read.
func (r Registry) Pull(ctx context.Context, ref string) (io.ReadCloser, error) {
	parsed, err := r.parse(ref)
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(parsed, r.options(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	return mutate.Extract(img), nil
}
