package build

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/mkimage/internal/kataagent"
	"github.com/allox-os/allox/mkimage/internal/spec"
	"github.com/allox-os/allox/rootfs"
)

// KataAgent is the kata-agent the build put into the image, as manifest.json records it.
type KataAgent struct {
	Path    string `json:"path"`    // in the image: /usr/bin/kata-agent
	SHA256  string `json:"sha256"`  // of the binary placed there
	Version string `json:"version"` // the first line `kata-agent --version` printed at build time
	// Source is "binary" or "from_image", From the file the spec names (relative to the checkout
	// when inside it), and for from_image InImage the file Path resolved to in that image and
	// Format how it was read.
	Source  string `json:"source"`
	From    string `json:"from"`
	InImage string `json:"in_image,omitempty"`
	Format  string `json:"format,omitempty"`
	// MaxRestarts is init's restart budget for it (spec kata.agent.max_restarts).
	MaxRestarts int `json:"max_restarts"`
}

// bringAgent copies or extracts the spec's kata-agent into the scratch space, runs its --version
// and records it; the rootfs stage places it at spec.AgentPath.
func bringAgent(ctx context.Context, s *state) error {
	a := s.opt.Spec.Kata.Agent
	if a == nil {
		s.reused("the spec brings no kata-agent")
		return nil
	}
	s.ran("copied and ran --version (the agent is not built here)")
	dst := filepath.Join(s.work, "kata-agent")
	rec := &KataAgent{Path: spec.AgentPath, MaxRestarts: a.MaxRestarts}
	field := "kata.agent.binary"
	if a.Binary != "" {
		rec.Source, rec.From = "binary", rel(s.opt.ModuleRoot, a.Binary)
		if err := copyExecutable(a.Binary, dst); err != nil {
			return fmt.Errorf("%s %s: %w", field, a.Binary, err)
		}
	} else {
		field = "kata.agent.from_image"
		rec.Source, rec.From = "from_image", rel(s.opt.ModuleRoot, a.FromImage)
		found, err := kataagent.Extract(a.FromImage, dst)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		rec.InImage, rec.Format = found.Path, found.Format
	}
	v, err := kataagent.Version(ctx, dst)
	if err != nil {
		return fmt.Errorf("%s %s: %w; the build records the version the agent prints, so it must run on the build host (linux/amd64)",
			field, a.Binary+a.FromImage, err)
	}
	rec.Version = v
	if rec.SHA256, err = kernel.HashFile(dst); err != nil {
		return err
	}
	src := a.Binary + a.FromImage
	if err := s.prov.addInput("kata-agent-"+rec.Source, rec.From, "", src); err != nil {
		return err
	}
	s.agent, s.prov.KataAgent = &rootfs.Binary{Path: spec.AgentPath, Source: dst}, rec
	fmt.Fprintf(indent(s.opt.Progress), "%s: %s (sha256 %s)\n", spec.AgentPath, v, rec.SHA256)
	return nil
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// agentRecord is the kata-agent the build brought, or nil.
func (s *state) agentRecord() *KataAgent {
	if s.prov == nil {
		return nil
	}
	return s.prov.KataAgent
}
