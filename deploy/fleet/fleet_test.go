package fleet_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/allox-os/allox/deploy/fleet"
	"github.com/allox-os/allox/deploy/fleet/internal/fleettest"
	"github.com/allox-os/allox/deploy/fleet/internal/payload"
	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/ golden files")

var (
	installerOnce sync.Once
	installerBin  string
	installerErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if installerBin != "" {
		os.RemoveAll(filepath.Dir(installerBin))
	}
	os.Exit(code)
}

// installer builds the real allox-deploy once per test binary.
func installer(t *testing.T) string {
	t.Helper()
	installerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "allox-deploy-bin-")
		if err != nil {
			installerErr = err
			return
		}
		installerBin = filepath.Join(dir, "allox-deploy")
		installerErr = fleet.BuildInstaller(context.Background(), moduleRoot(t), installerBin)
	})
	if installerErr != nil {
		t.Fatal(installerErr)
	}
	return installerBin
}

func moduleRoot(t *testing.T) string {
	d, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newRegistry serves go-containerregistry's in-process registry, through wrap when given.
func newRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

var reg = fleet.Registry{Insecure: true}

// artifact is a payload and its image.
type artifact struct {
	*fleet.Payload
	Image v1.Image
}

func image(t *testing.T, out string) artifact {
	t.Helper()
	p, err := fleet.SelectPayload(out)
	if err != nil {
		t.Fatal(err)
	}
	img, err := fleet.Image(p, installer(t))
	if err != nil {
		t.Fatal(err)
	}
	return artifact{p, img}
}

func push(t *testing.T, out, ref string) (artifact, string) {
	t.Helper()
	a := image(t, out)
	pinned, err := reg.Push(context.Background(), a.Image, ref)
	if err != nil {
		t.Fatal(err)
	}
	return a, pinned
}

// pull unpacks ref into a new directory, as a container runtime would, or returns the error.
func pull(t *testing.T, ref string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	return dir, reg.Pull(context.Background(), ref, dir)
}

// The real build goes to the registry and comes back bit for bit: every payload file matches
// manifest.json and the source, and the installer is the entrypoint's binary.
func TestPushPullRealBuild(t *testing.T) {
	out := testenv.NeedOut(t, "manifest.json", "kata/install.sh", "bzImage")
	host := newRegistry(t, nil)
	a, pinned := push(t, out, host+"/allox/"+"allox:test")
	if !strings.HasPrefix(pinned, host+"/allox/allox@sha256:") {
		t.Fatalf("pushed reference %q is not digest-pinned in the repository", pinned)
	}
	dir, err := pull(t, pinned)
	if err != nil {
		t.Fatal(err)
	}
	req, err := payload.Required(filepath.Join(dir, "payload"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := payload.Verify(filepath.Join(dir, "payload"), req); err != nil {
		t.Fatal(err)
	}
	for _, f := range a.Files {
		same(t, filepath.Join(out, f), filepath.Join(dir, "payload", f))
	}
	same(t, installer(t), filepath.Join(dir, "allox-deploy"))
	if st, err := os.Stat(filepath.Join(dir, "payload", "vmlinux")); err == nil {
		t.Errorf("vmlinux (%d bytes) is in the payload: only what a node installs belongs there", st.Size())
	}
	layers, err := a.Image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			t.Fatal(err)
		}
		size += n
	}
	t.Logf("%s: %d payload files, %d layers, %.1f MiB compressed", pinned, len(a.Files), len(layers), float64(size)/(1<<20))
}

func same(t *testing.T, want, got string) {
	t.Helper()
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w, g) {
		t.Errorf("%s: pulled %d bytes differ from the pushed %d bytes", got, len(g), len(w))
	}
}

// Two pushes of the same output directory, to two tags, give one digest; and the image's config
// says what runs.
func TestPushTwiceSameDigest(t *testing.T) {
	out := fleettest.Out(t, "allox")
	host := newRegistry(t, nil)
	a, first := push(t, out, host+"/allox/allox:one")
	_, second := push(t, out, host+"/allox/allox:two")
	if at(first) != at(second) {
		t.Fatalf("same output directory, two digests: %s and %s", first, second)
	}
	// A rebuilt installer is byte-identical too, so mkimage push is reproducible end to end.
	again := filepath.Join(t.TempDir(), "allox-deploy")
	if err := fleet.BuildInstaller(context.Background(), moduleRoot(t), again); err != nil {
		t.Fatal(err)
	}
	same(t, installer(t), again)
	cf, err := a.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || strings.Join(cf.Config.Entrypoint, " ") != "/allox-deploy" || !cf.Created.Time.Equal(cf.Created.Time.UTC()) || cf.Created.Unix() != 0 {
		t.Errorf("config: os %s arch %s entrypoint %q created %v; want linux amd64 /allox-deploy at source_date_epoch 0", cf.OS, cf.Architecture, cf.Config.Entrypoint, cf.Created)
	}
	layers, err := a.Image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1+len(a.Files) {
		t.Errorf("%d layers for %d payload files: want one for the installer and one per file", len(layers), len(a.Files))
	}
}

func at(ref string) string { return ref[strings.Index(ref, "@")+1:] }

// A registry (or a man in the middle) serving other bytes for a layer: the pull fails naming the
// layer, whether the bytes are another valid layer or the same layer with one gzip header byte
// changed (same length, and it still decompresses to the same tar: only the digest tells).
func TestTamperedLayerRefused(t *testing.T) {
	out := fleettest.Out(t, "allox")
	a := image(t, out)
	layers, err := a.Image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	victim, err := layers[len(layers)-1].Digest() // the last payload file
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		forge func(victim, other []byte) []byte
	}{
		{"another layer", func(_, other []byte) []byte { return other }},
		{"gzip OS byte", func(victim, _ []byte) []byte {
			b := bytes.Clone(victim)
			b[9] ^= 0xff // RFC 1952: the OS field, which decompressors ignore
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forged := tc.forge(compressed(t, layers[len(layers)-1]), compressed(t, layers[len(layers)-2]))
			host := newRegistry(t, func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+victim.String()) {
						w.Write(forged)
						return
					}
					h.ServeHTTP(w, r)
				})
			})
			pinned, err := reg.Push(context.Background(), a.Image, host+"/allox/allox:tampered")
			if err != nil {
				t.Fatal(err)
			}
			_, err = pull(t, pinned)
			if err == nil {
				t.Fatalf("pulled %s although the registry served other bytes for layer %s", pinned, victim)
			}
			if !strings.Contains(err.Error(), "layer "+victim.String()) {
				t.Errorf("the refusal does not name the layer %s: %v", victim, err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func compressed(t *testing.T, l v1.Layer) []byte {
	t.Helper()
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An output directory whose file changed after the build is never published: mkimage push names
// the file.
func TestPushRefusesChangedOutput(t *testing.T) {
	out := fleettest.Out(t, "allox")
	if err := os.WriteFile(filepath.Join(out, "bzImage"), []byte("another kernel\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := fleet.SelectPayload(out)
	if !errors.Is(err, payload.ErrMismatch) || !strings.Contains(err.Error(), "bzImage: sha256") {
		t.Fatalf("Image of a changed bzImage: %v; want a refusal naming bzImage", err)
	}
}

// The attestation and the SBOM travel in the image beside the payload; what a node pulls verifies
// with the trusted key. Trust refuses, before anything is pushed, a payload the key did not sign.
func TestImageCarriesAttestation(t *testing.T) {
	out := fleettest.Out(t, "allox")
	a, pinned := push(t, out, newRegistry(t, nil)+"/allox/allox:signed")
	for _, f := range []string{"attestation.intoto.jsonl", "sbom.spdx.json"} {
		if !slices.Contains(a.Files, f) {
			t.Errorf("the payload lacks %s: %q", f, a.Files)
		}
	}
	dir, err := pull(t, pinned)
	if err != nil {
		t.Fatal(err)
	}
	key, err := attestation.LoadKey(fleettest.TrustedKey(t, out), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := payload.CheckAttestation(context.Background(), filepath.Join(dir, "payload"), nil, key); err != nil {
		t.Errorf("the pulled payload: %v", err)
	}
	if pem, err := fleet.Trust(context.Background(), a.Payload, fleettest.TrustedKey(t, out)); err != nil || len(pem) == 0 {
		t.Errorf("Trust with the signing key: %v", err)
	}
	trusted := fleettest.TrustedKey(t, out)
	fleettest.Resign(t, out)
	if _, err := fleet.Trust(context.Background(), a.Payload, trusted); !errors.Is(err, attestation.ErrOtherKey) {
		t.Errorf("Trust of a payload signed by another key: %v", err)
	}
	if _, err := fleet.Trust(context.Background(), a.Payload, ""); err == nil || !strings.Contains(err.Error(), "no trusted key: pass -verify-key") {
		t.Errorf("Trust without a key: %v", err)
	}
}

// A new build that changes only the image shares every other layer with the old one, so nodes and
// registries fetch and store only the image and manifest.json again.
func TestUnchangedFilesShareLayers(t *testing.T) {
	out := fleettest.Out(t, "allox")
	old := layerDigests(t, out)
	if err := os.WriteFile(filepath.Join(out, "rootfs.img"), []byte("the next version's image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fleettest.WriteManifest(t, out, "allox")
	fleettest.Resign(t, out)
	var changed []string
	for name, d := range layerDigests(t, out) {
		if old[name] != d {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	if want := []string{"/payload/attestation.intoto.jsonl", "/payload/manifest.json", "/payload/rootfs.img"}; !slices.Equal(changed, want) {
		t.Errorf("layers that changed: %q, want %q", changed, want)
	}
}

// layerDigests maps each layer's file (from the image history) to the layer's digest.
func layerDigests(t *testing.T, out string) map[string]string {
	t.Helper()
	a := image(t, out)
	cf, err := a.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := a.Image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for i, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		m[strings.TrimPrefix(cf.History[i].CreatedBy, "mkimage push: ")] = d.String()
	}
	return m
}

// A private registry: the push authenticates with the credentials of the standard keychain (the
// docker config that $DOCKER_CONFIG names), and without them it is refused.
func TestPushPrivateRegistry(t *testing.T) {
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if user, pass, ok := r.BasicAuth(); !ok || user != "platform" || pass != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="allox"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	a := image(t, fleettest.Out(t, "allox"))
	ctx := context.Background()
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	if _, err := reg.Push(ctx, a.Image, host+"/private/allox:1"); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Fatalf("push without credentials: %v; want a 401", err)
	}
	config := `{"auths": {"` + host + `": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("platform:s3cret")) + `"}}}`
	if err := os.WriteFile(filepath.Join(os.Getenv("DOCKER_CONFIG"), "config.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	pinned, err := reg.Push(ctx, a.Image, host+"/private/allox:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pull(t, pinned); err != nil {
		t.Fatal(err)
	}
}
