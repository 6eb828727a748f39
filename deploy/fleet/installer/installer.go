// Package installer is the node side of a fleet rollout, what the allox-deploy DaemonSet pod runs
// with the host's root mounted at Root: Install verifies the payload against its manifest.json,
// stages it on the host, runs the payload's own install.sh with the host's shell (chrooted into
// Root, so it sees the host's paths and tools), adds the containerd runtime handlers and restarts
// containerd; Cleanup undoes all of it, so the node is as it was. What Install did is recorded in a
// state file on the host, so Cleanup works from a new pod too.
package installer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/allox-os/allox/deploy/fleet/internal/payload"
	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/attestation"
)

// StateRoot is the host directory below which the installer keeps, per image name, the staged
// payload (out/, the build output install.sh expects) and state.json.
const StateRoot = "/var/lib/allox-deploy"

// Options configure one install or cleanup.
type Options struct {
	// Root is the host's root directory as the pod sees it (/host); "/" runs on the host itself.
	Root string
	// Payload is the verified build output to install (the image's /payload).
	Payload string
	// ConfigDir is the host's Kata configuration directory for the image; "" is
	// /etc/kata-containers/<name>, where the containerd handlers' ConfigPath points.
	ConfigDir string
	// KataDefaults, when set, is passed to install.sh as KATA_DEFAULTS (a host path).
	KataDefaults string
	// VerifyKey is the PEM public key (a path in the pod) whose signed attestation the payload must
	// carry; payload.NoVerify installs without checking who built it. install.sh checks it too.
	VerifyKey string
	// RestartContainerd restarts the host's containerd (systemctl, in Root) after its configuration
	// changed, as kata-deploy does.
	RestartContainerd bool
	// Label marks the node as ready for the image's RuntimeClasses (and unmarks it); nil skips it.
	Label Labeler
	// Log receives progress lines and install.sh's output.
	Log io.Writer
}

// Labeler sets or removes the node label the RuntimeClasses select on.
type Labeler interface {
	Label(ctx context.Context, key string, set bool) error
}

// NodeLabel is the label Install sets on a node where image name is installed; its RuntimeClasses
// schedule onto nodes with it (kata-deploy's katacontainers.io/kata-runtime=true).
func NodeLabel(name string) string { return "allox-os.io/" + name }

// state is what Install did, in StateRoot/<name>/state.json.
type state struct {
	Name        string           `json:"name"`
	ConfigDir   string           `json:"config_dir"`
	Containerd  *containerdState `json:"containerd,omitempty"`
	CreatedDirs []string         `json:"created_dirs"`
	// Installed says install.sh finished; before that its --uninstall may find nothing to remove.
	Installed bool `json:"installed"`
	Labeled   bool `json:"labeled"`
}

func (o Options) logf(format string, args ...any) {
	fmt.Fprintf(o.Log, "allox-deploy: "+format+"\n", args...)
}

func stateDir(name string) string { return path.Join(StateRoot, name) }

func (o Options) readState(name string) (*state, error) {
	data, err := o.readHost(path.Join(stateDir(name), "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s state
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w (remove it and clean up by hand)", path.Join(stateDir(name), "state.json"), err)
	}
	return &s, nil
}

func (o Options) writeState(s *state) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return o.writeHost(path.Join(stateDir(s.Name), "state.json"), append(data, '\n'), 0o600)
}

// verify checks the payload and returns its manifest; nothing is written before it passes.
func (o Options) verify() (*payload.Manifest, error) {
	req, err := payload.Required(o.Payload)
	if err != nil {
		return nil, fmt.Errorf("payload %s: %w", o.Payload, err)
	}
	m, err := payload.Verify(o.Payload, req)
	if err != nil {
		return nil, fmt.Errorf("payload %s: %w; nothing was installed", o.Payload, err)
	}
	if err := o.checkAttestation(context.Background()); err != nil {
		return nil, fmt.Errorf("payload %s: %w; nothing was installed", o.Payload, err)
	}
	return m, nil
}

// checkAttestation checks the payload's signed attestation with VerifyKey.
func (o Options) checkAttestation(ctx context.Context) error {
	switch o.VerifyKey {
	case "":
		return errors.New("no trusted key: pass -verify-key FILE (the PEM public key whose signature you trust), or -verify-key none to install without checking who built it")
	case payload.NoVerify:
		o.logf("-verify-key none: the attestation is not checked")
		return nil
	}
	key, err := attestation.LoadKey(o.VerifyKey, false)
	if err != nil {
		return fmt.Errorf("-verify-key: %w", err)
	}
	if err := payload.CheckAttestation(ctx, o.Payload, nil, key); err != nil {
		return err
	}
	id, _ := key.KeyID()
	o.logf("the attestation is signed by %s and names every payload file", id)
	return nil
}

// stageKey copies the trusted key beside the staged payload, for install.sh's own check, and
// returns install.sh's ALLOX_VERIFY_KEY (a host path, or none).
func (o Options) stageKey(name string) (string, error) {
	if o.VerifyKey == payload.NoVerify {
		return payload.NoVerify, nil
	}
	data, err := os.ReadFile(o.VerifyKey)
	if err != nil {
		return "", err
	}
	p := path.Join(stateDir(name), "trusted.pub")
	return p, o.writeHost(p, data, 0o644)
}

func (o Options) configDir(name string) string {
	if o.ConfigDir != "" {
		return o.ConfigDir
	}
	return "/etc/kata-containers/" + name
}

// Install verifies the payload, then installs it on the host. A previous install of the same image
// is cleaned up first; a failed install is rolled back.
func Install(ctx context.Context, o Options) error {
	m, err := o.verify()
	if err != nil {
		return err
	}
	name := m.Image.Name
	if err := Cleanup(ctx, o); err != nil {
		return fmt.Errorf("clean up the previous install: %w", err)
	}
	s := &state{Name: name, ConfigDir: o.configDir(name)}
	if err := o.install(ctx, s); err != nil {
		// Roll back even when the install was stopped (SIGTERM): that stop must not leave half of it.
		if cerr := o.cleanup(context.WithoutCancel(ctx), s); cerr != nil {
			return fmt.Errorf("%w; rolling back also failed: %w", err, cerr)
		}
		return fmt.Errorf("%w (rolled back)", err)
	}
	o.logf("installed %s %s; Kata configuration in %s", name, m.Image.Version, s.ConfigDir)
	return nil
}

func (o Options) install(ctx context.Context, s *state) error {
	before, err := o.dirs()
	if err != nil {
		return err
	}
	defer func() { s.CreatedDirs = o.newDirs(before, s.CreatedDirs) }()
	staged := path.Join(stateDir(s.Name), "out")
	dst, err := o.host(staged)
	if err != nil {
		return err
	}
	if err := copyTree(o.Payload, dst); err != nil {
		return fmt.Errorf("stage the payload in %s: %w", staged, err)
	}
	s.CreatedDirs = o.newDirs(before, nil)
	if err := o.writeState(s); err != nil {
		return err
	}
	key, err := o.stageKey(s.Name)
	if err != nil {
		return err
	}
	env := []string{"ALLOX_VERIFY_KEY=" + key, "TMPDIR=" + stateDir(s.Name)} // the host may have no /tmp
	if o.KataDefaults != "" {
		env = append(env, "KATA_DEFAULTS="+o.KataDefaults)
	}
	if err := o.inHost(ctx, env, "/bin/sh", path.Join(staged, "kata", kata.InstallSh), s.ConfigDir); err != nil {
		return fmt.Errorf("install.sh: %w", err)
	}
	s.Installed = true
	if s.Containerd, err = o.configureContainerd(s.Name, staged); err != nil {
		return err
	}
	s.CreatedDirs = o.newDirs(before, s.CreatedDirs)
	if err := o.writeState(s); err != nil {
		return err
	}
	if err := o.restartContainerd(ctx); err != nil {
		return err
	}
	if o.Label != nil {
		if err := o.Label.Label(ctx, NodeLabel(s.Name), true); err != nil {
			return fmt.Errorf("label the node %s: %w", NodeLabel(s.Name), err)
		}
		s.Labeled = true
	}
	return o.writeState(s)
}

// Cleanup removes what Install installed for the payload's image, using the state Install left on
// the host: the node label, the containerd handlers (then containerd is restarted), the files
// install.sh installed (install.sh --uninstall), the staged payload and every directory Install
// created. Without state there is nothing to do.
func Cleanup(ctx context.Context, o Options) error {
	m, err := payload.ReadManifest(o.Payload)
	if err != nil {
		return err
	}
	s, err := o.readState(m.Image.Name)
	if err != nil || s == nil {
		return err
	}
	if err := o.cleanup(ctx, s); err != nil {
		return err
	}
	o.logf("removed %s", s.Name)
	return nil
}

// ErrNotInstalled is Status's answer until Install has finished on the host.
var ErrNotInstalled = errors.New("not installed")

// Status succeeds once install.sh has run and containerd has the handlers for the payload's image:
// the DaemonSet's readiness probe.
func Status(o Options) error {
	m, err := payload.ReadManifest(o.Payload)
	if err != nil {
		return err
	}
	s, err := o.readState(m.Image.Name)
	switch {
	case err != nil:
		return err
	case s == nil || !s.Installed || s.Containerd == nil:
		return fmt.Errorf("%s: %w", m.Image.Name, ErrNotInstalled)
	}
	fmt.Fprintf(o.Log, "%s installed; Kata configuration in %s\n", s.Name, s.ConfigDir)
	return nil
}

func (o Options) cleanup(ctx context.Context, s *state) error {
	var errs []error
	if s.Labeled && o.Label != nil {
		// First, so no new pod is scheduled here while the runtime goes; a failure (the RBAC may be
		// deleted with the DaemonSet) must not keep the files on the node.
		if err := o.Label.Label(ctx, NodeLabel(s.Name), false); err != nil {
			o.logf("the node keeps its label %s (remove it: kubectl label node NODE %s-): %v", NodeLabel(s.Name), NodeLabel(s.Name), err)
		}
		s.Labeled = false
	}
	// Each step undone is recorded at once, so a cleanup that stops can be run again.
	if s.Containerd != nil {
		if err := o.unconfigureContainerd(s.Containerd); err != nil {
			errs = append(errs, err)
		} else {
			s.Containerd = nil
			errs = append(errs, o.writeState(s), o.restartContainerd(ctx))
		}
	}
	staged := path.Join(stateDir(s.Name), "out")
	script := path.Join(staged, "kata", kata.InstallSh)
	if text, err := o.readHost(script); err == nil {
		if !bytes.Contains(text, []byte("--uninstall")) {
			return fmt.Errorf("%s has no --uninstall (an older mkimage rendered it): remove what it installed by hand (see %s), or roll out a rebuild first", script, kata.InstallSh)
		}
		err := o.inHost(ctx, nil, "/bin/sh", script, "--uninstall", s.ConfigDir)
		switch {
		case err != nil && s.Installed:
			errs = append(errs, fmt.Errorf("install.sh --uninstall: %w", err))
		case err != nil:
			// install.sh stopped before it finished (it checks everything before it writes): what
			// it may have left is found below, among the directories the install created.
			o.logf("install.sh did not finish; its --uninstall: %v", err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	dir, err := o.host(stateDir(s.Name))
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return o.removeDirs(s.CreatedDirs)
}
