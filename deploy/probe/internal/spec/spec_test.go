package spec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	src := `
devbox "alpha" {
  runtime = "process"
  agent   = "main"
  session "s1" {}
  session "s2" {}
}
devbox "beta" {}
`
	got, diags := Parse("fleet.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatal(Format(diags))
	}
	want := []DevBox{
		{Name: "alpha", Runtime: "process", MemoryMiB: 1024, State: "running", Agent: "main", Sessions: []Session{{Name: "s1"}, {Name: "s2"}}},
		{Name: "beta", Runtime: "qemu", MemoryMiB: 1024, State: "running", Agent: "main"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"unknown key", "devbox \"a\" {\n  cpu = 2\n}", `fleet.hcl:2,3: Unsupported argument; An argument named "cpu" is not expected here.`},
		{"bad runtime", "devbox \"a\" {\n  runtime = \"docker\"\n}", `fleet.hcl:2,3: Invalid runtime; devbox "a": runtime = "docker"; use one of qemu, process.`},
		{"bad state", "devbox \"a\" {\n\n  state = \"paused\"\n}", `fleet.hcl:3,3: Invalid state; devbox "a": state = "paused"; use one of running, stopped.`},
		{"memory", "devbox \"a\" {\n  memory_mib = 1\n}", `fleet.hcl:2,3: Invalid memory_mib; devbox "a": memory_mib = 1; use 256 to 1048576 (MiB), e.g. 1024.`},
		{"bad name", `devbox "A_1" {}`, `fleet.hcl:1,1: Invalid devbox name; devbox "A_1": a name is 1-63 of a-z, 0-9 and '-', starting with a letter or digit.`},
		{"duplicate", "devbox \"a\" {}\ndevbox \"a\" {}", `fleet.hcl:2,1: Duplicate devbox; devbox "a" is declared twice: give each DevBox its own name.`},
		{"duplicate session", "devbox \"a\" {\n  session \"x\" {}\n  session \"x\" {}\n}", `fleet.hcl:3,3: Duplicate session; devbox "a": session "x" is declared twice: give each its own name.`},
		{"empty", ``, `No devbox block`},
		{"syntax", `devbox "a" {`, `fleet.hcl:1,12: Unclosed configuration block`},
		{"rule kind", "devbox \"a\" {\n  session \"x\" {\n    dialog_rule \"r\" {\n      kind = \"poll\"\n      answer = \"allow\"\n    }\n  }\n}", `fleet.hcl:2,3: Invalid dialog_rule kind; devbox "a": session "x": dialog_rule "r": kind = "poll"; use permission or question`},
		{"rule prompt", "devbox \"a\" {\n  session \"x\" {\n    dialog_rule \"r\" {\n      prompt = \"(\"\n      answer = \"allow\"\n    }\n  }\n}", `dialog_rule "r": prompt is not an RE2 regular expression`},
		{"rule answer", "devbox \"a\" {\n  session \"x\" {\n    dialog_rule \"r\" {\n      answer = \"\"\n    }\n  }\n}", `dialog_rule "r": answer is empty`},
		{"rule no answer", "devbox \"a\" {\n  session \"x\" {\n    dialog_rule \"r\" {}\n  }\n}", `The argument "answer" is required`},
		{"wrong type", "devbox \"a\" {\n  memory_mib = \"lots\"\n}", `fleet.hcl:2,17: Unsuitable value type; Unsuitable value: a number is required`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, diags := Parse("fleet.hcl", []byte(tc.src))
			if got != nil || !diags.HasErrors() {
				t.Fatalf("Parse = %v, %v; want no DevBoxes and an error", got, diags)
			}
			if s := Format(diags); !strings.Contains(s, tc.want) {
				t.Errorf("diagnostics:\n%s\nwant one containing %q", s, tc.want)
			}
		})
	}
}

// A session's dialog rules decode, and match on kind and prompt.
func TestDialogRules(t *testing.T) {
	got, diags := Parse("fleet.hcl", []byte(`devbox "a" {
  session "s" {
    dialog_rule "tests" {
      kind   = "permission"
      prompt = "^run (go|make) test"
      answer = "allow"
    }
    dialog_rule "rest" { answer = "deny" }
  }
}`))
	if diags.HasErrors() {
		t.Fatal(Format(diags))
	}
	s, ok := got[0].Session("s")
	if !ok || len(s.DialogRules) != 2 {
		t.Fatalf("session s: %+v", s)
	}
	tests, rest := s.DialogRules[0], s.DialogRules[1]
	for _, tc := range []struct {
		rule         DialogRule
		kind, prompt string
		want         bool
	}{
		{tests, "permission", "run go test ./...", true},
		{tests, "question", "run go test ./...", false},
		{tests, "permission", "please run go test", false},
		{rest, "question", "anything", true},
	} {
		if got := tc.rule.Match(tc.kind, tc.prompt); got != tc.want {
			t.Errorf("rule %s on %s %q: %v, want %v", tc.rule.Name, tc.kind, tc.prompt, got, tc.want)
		}
	}
	if SameSessions(got[0].Sessions, []Session{{Name: "s"}}) {
		t.Error("sessions with and without rules compare equal: a rule change would not be applied")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("devbox \"a\" {\n  session \"s\" {}\n}"))
	f.Add([]byte(`devbox "a" { runtime = "process" state = "stopped" }`))
	f.Fuzz(func(t *testing.T, src []byte) {
		got, diags := Parse("f.hcl", src)
		if (got == nil) != diags.HasErrors() {
			t.Fatalf("Parse = %v with errors %v: DevBoxes must be nil exactly when there is an error", got, diags.HasErrors())
		}
		for _, d := range got {
			if !nameRE.MatchString(d.Name) {
				t.Fatalf("accepted name %q", d.Name)
			}
		}
	})
}
