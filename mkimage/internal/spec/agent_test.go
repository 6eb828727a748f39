package spec

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/google/go-cmp/cmp"
)

// withKata replaces the base spec's kata block body.
func withKata(t *testing.T, body string) string {
	t.Helper()
	src := strings.Replace(validSpec, "kata {\n  boot_mode = \"image\"\n}", "kata {\n  boot_mode = \"image\"\n"+body+"}", 1)
	if src == validSpec {
		t.Fatal("kata block not found in the base spec")
	}
	return src
}

func TestParseAgent(t *testing.T) {
	img, diags := Parse("test.hcl", []byte(validSpec), "../../../images")
	if diags.HasErrors() {
		t.Fatal(render(t, diags))
	}
	if img.Kata.Agent != nil || img.Kata.RequireAgent || img.Manifest().KataAgent != nil {
		t.Errorf("no agent block: agent %+v, require_agent %v; want none", img.Kata.Agent, img.Kata.RequireAgent)
	}
	src := withKata(t, "  require_agent = true\n  agent {\n    binary = \"allox.hcl\"\n  }\n")
	img, diags = Parse("test.hcl", []byte(src), "../../../images")
	if diags.HasErrors() {
		t.Fatal(render(t, diags))
	}
	abs, _ := filepath.Abs("../../../images/allox.hcl")
	want := &KataAgent{Binary: abs, MaxRestarts: DefaultAgentRestarts}
	if diff := cmp.Diff(want, img.Kata.Agent); diff != "" || !img.Kata.RequireAgent {
		t.Errorf("agent (-want +got):\n%s (require_agent %v)", diff, img.Kata.RequireAgent)
	}
	if diff := cmp.Diff(&manifest.KataAgent{Path: AgentPath, MaxRestarts: DefaultAgentRestarts}, img.Manifest().KataAgent); diff != "" {
		t.Errorf("manifest kata_agent (-want +got):\n%s", diff)
	}
	src = withKata(t, "  agent {\n    from_image   = \"allox.hcl\"\n    max_restarts = 0\n  }\n")
	if img, diags = Parse("test.hcl", []byte(src), "../../../images"); diags.HasErrors() {
		t.Fatal(render(t, diags))
	}
	if a := img.Kata.Agent; a.FromImage != abs || a.Binary != "" || a.MaxRestarts != 0 {
		t.Errorf("from_image agent %+v", a)
	}
}

func TestParseAgentErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{{
		name: "required without an agent",
		body: "  require_agent = true\n",
		want: []string{`37:19: No kata-agent for a Kata image: kata.require_agent is true but no kata.agent block puts an agent at /usr/bin/kata-agent: a Kata runtime waits 45 s for it and gives up. Add agent { binary = "/opt/kata/bin/kata-agent" } (the one of your Kata release) or agent { from_image = "/opt/kata/share/kata-containers/kata-containers.img" } to the kata block, or set require_agent = false.`},
	}, {
		name: "no source",
		body: "  agent {\n  }\n",
		want: []string{`37:3: No source for the kata-agent: The agent block needs exactly one of binary (a kata-agent executable, e.g. "/opt/kata/bin/kata-agent") and from_image (a Kata guest image, e.g. "/opt/kata/share/kata-containers/kata-containers.img").`},
	}, {
		name: "two sources",
		body: "  agent {\n    binary     = \"allox.hcl\"\n    from_image = \"allox.hcl\"\n  }\n",
		want: []string{`39:18: Two sources for the kata-agent: The agent block sets both binary and from_image; keep one: binary for an executable, from_image to take /usr/bin/kata-agent out of a Kata guest image.`},
	}, {
		name: "missing binary",
		body: "  agent {\n    binary = \"kata-agent\"\n  }\n",
		want: []string{`38:14: File not found: $ROOT/images/kata-agent does not exist (relative paths resolve against $ROOT/images).`},
	}, {
		name: "negative budget",
		body: "  agent {\n    binary       = \"allox.hcl\"\n    max_restarts = -1\n  }\n",
		want: []string{`39:20: Invalid restart budget: max_restarts must be 0 (power off at the first failure, as Kata's own unit does) to 100; got -1. The default is 3.`},
	}, {
		name: "typo",
		body: "  agent {\n    binery = \"allox.hcl\"\n  }\n",
		want: []string{
			`37:3: No source for the kata-agent: The agent block needs exactly one of binary (a kata-agent executable, e.g. "/opt/kata/bin/kata-agent") and from_image (a Kata guest image, e.g. "/opt/kata/share/kata-containers/kata-containers.img").`,
			`38:5: Unsupported argument: An argument named "binery" is not expected here. Did you mean "binary"?`,
		},
	}, {
		name: "require_agent as a string",
		body: "  require_agent = \"yes\"\n",
		want: []string{`37:19: Unsuitable value type: Unsuitable value: a bool is required`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := Parse("test.hcl", []byte(withKata(t, tc.body)), "../../../images")
			if diff := cmp.Diff(tc.want, render(t, diags)); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseAgentBesideAService(t *testing.T) {
	src := strings.Replace(withKata(t, "  agent {\n    binary = \"allox.hcl\"\n  }\n"), `command = ["/bin/store"]`, `command = ["/usr/bin/kata-agent"]`, 1)
	_, diags := Parse("test.hcl", []byte(src), "../../../images")
	want := []string{`28:1: A service runs the kata-agent: Service "store" runs or is named after the kata-agent, which init runs itself from the kata.agent block: remove the service, or the agent block.`}
	if diff := cmp.Diff(want, render(t, diags)); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
}
