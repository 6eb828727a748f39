package config

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseDefinitionsAndTenants(t *testing.T) {
	src := `
definition "box" {
  init = ["bwrap", "--tmpfs", runtime_dir, "--"]
  cleanup = [kuruwa, "cleanup"]
  ready_timeout = "2s"
}
tenant "agent" {
  definitions = ["box", "host"]
}
`
	cfg, diags := Parse([]byte(src), "k.hcl", Vars{RuntimeDir: "/run/k", Kuruwa: "/bin/kuruwa"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want := &Config{
		Definitions: map[string]Definition{
			"host": hostDefinition(),
			"box":  {Name: "box", Kind: KindCommand, Init: []string{"bwrap", "--tmpfs", "/run/k", "--"}, Cleanup: []string{"/bin/kuruwa", "cleanup"}, ReadyTimeout: 2 * time.Second},
		},
		Tenants: map[string]Tenant{"agent": {Name: "agent", Definitions: []string{"box", "host"}}},
	}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestParseSessionDefinition(t *testing.T) {
	src := `
definition "shell" {
  kind       = "allox_session"
  daemon     = "http://127.0.0.1:8092"
  token_file = "/run/allox/rpc-token"
  agent      = "a"
}
`
	cfg, diags := Parse([]byte(src), "k.hcl", Vars{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want := Definition{Name: "shell", Kind: KindAlloxSession, ReadyTimeout: 5 * time.Second,
		Session: &SessionDef{Daemon: "http://127.0.0.1:8092", TokenFile: "/run/allox/rpc-token", Agent: "a"}}
	if diff := cmp.Diff(want, cfg.Definitions["shell"]); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestParseDiagnostics(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"unknown attribute", `definition "b" {
  init = ["x"]
  inti = ["y"]
}`, `k.hcl:3:3: error: Unsupported argument`},
		{"unknown definition suggests", `definition "sandbox" { init = ["x"] }
tenant "a" { definitions = ["sandbx"] }`, `Did you mean "sandbox"?`},
		{"reserved definition", `definition "host" { init = ["x"] }`, `Reserved definition name`},
		{"reserved tenant", `tenant "host" {}`, `Reserved tenant name`},
		{"duplicate definition", `definition "b" { init = ["x"] }
definition "b" { init = ["y"] }`, `k.hcl:2:12: error: Duplicate definition`},
		{"empty init", `definition "b" { init = [] }`, `Empty init`},
		{"missing init", `definition "b" {}`, `Missing required argument`},
		{"bad timeout", `definition "b" {
  init = ["x"]
  ready_timeout = "soon"
}`, `ready_timeout "soon" must be a duration`},
		{"bad name", `tenant "../x" {}`, `must start with a letter or digit`},
		{"unknown kind", `definition "b" { kind = "allox-session" }`, `Did you mean "allox_session"?`},
		{"session without daemon", `definition "b" { kind = "allox_session" }`, `needs daemon`},
		{"session with init", `definition "b" {
  kind = "allox_session"
  daemon = "http://127.0.0.1:8092"
  init = ["bwrap"]
}`, `k.hcl:4:3: error: Attribute of another kind`},
		{"session bad daemon", `definition "b" {
  kind = "allox_session"
  daemon = "127.0.0.1:8092"
}`, `use "http://HOST:PORT"`},
		{"daemon on a command definition", `definition "b" {
  init = ["x"]
  daemon = "http://127.0.0.1:8092"
}`, `daemon belongs to kind = "allox_session" definitions`},
		{"unknown block", `sandbox "x" {}`, `Unsupported block type`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := Parse([]byte(tc.src), "k.hcl", Vars{})
			if !diags.HasErrors() {
				t.Fatal("no error")
			}
			var b bytes.Buffer
			Format(&b, []byte(tc.src), diags)
			if !strings.Contains(b.String(), tc.want) {
				t.Fatalf("diagnostics do not mention %q:\n%s", tc.want, b.String())
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`definition "b" { init = ["x"] }` + "\n" + `tenant "a" { definitions = ["b"] }`))
	f.Add([]byte(`tenant "a" {}`))
	f.Fuzz(func(t *testing.T, src []byte) {
		cfg, diags := Parse(src, "f.hcl", Vars{})
		if diags.HasErrors() != (cfg == nil) {
			t.Fatalf("errors %v but config %v", diags.HasErrors(), cfg != nil)
		}
		if cfg != nil {
			for name, tn := range cfg.Tenants {
				if CheckName(name) != nil || name == HostTenant {
					t.Fatalf("accepted tenant name %q", name)
				}
				for _, d := range tn.Definitions {
					if _, ok := cfg.Definitions[d]; !ok {
						t.Fatalf("tenant %s names undeclared definition %q", name, d)
					}
				}
			}
		}
	})
}
