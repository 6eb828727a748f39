// Package spec is the Gateway's DevBox and session specification: HCL files like the image spec,
// decoded against an explicit schema (unknown keys are errors), then checked, with diagnostics
// that name the file and line and say how to fix the spec.
//
//	devbox "alpha" {
//	  runtime    = "qemu"      # qemu (the appliance VM) or process (the daemon on the host)
//	  memory_mib = 1024
//	  state      = "running"   # or "stopped"
//	  agent      = "main"
//	  session "s1" {
//	    dialog_rule "tests" {          # the dialog channel's policy: answers the Gateway gives
//	      kind   = "permission"        # optional: permission or question
//	      prompt = "^Claude Code wants to use Bash: go test " # optional: an RE2 the prompt matches
//	      answer = "allow"             # one of the question's options
//	    }
//	  }
//	}
package spec

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// DevBox is one Worker Sandbox with its agent and sessions: the desired state the Gateway owns.
type DevBox struct {
	Name      string    `hcl:"name,label" json:"name"`
	Runtime   string    `hcl:"runtime,optional" json:"runtime"`
	MemoryMiB int       `hcl:"memory_mib,optional" json:"memory_mib"`
	State     string    `hcl:"state,optional" json:"state"`
	Agent     string    `hcl:"agent,optional" json:"agent"`
	Sessions  []Session `hcl:"session,block" json:"sessions"`
}

// Session is a session of the DevBox's agent.
type Session struct {
	Name string `hcl:"name,label" json:"name"`
	// DialogRules answer the session's dialog requests on the Gateway's behalf, first match wins;
	// a request no rule matches waits for a person.
	DialogRules []DialogRule `hcl:"dialog_rule,block" json:"dialog_rules,omitempty"`
}

// DialogRule is one policy answer of the dialog channel. It matches a request's kind and prompt
// (in the Gateway's memory only) and answers it with Answer, recorded as policy:DEVBOX/SESSION/NAME.
type DialogRule struct {
	Name   string `hcl:"name,label" json:"name"`
	Kind   string `hcl:"kind,optional" json:"kind,omitempty"`
	Prompt string `hcl:"prompt,optional" json:"prompt,omitempty"`
	Answer string `hcl:"answer" json:"answer"`
}

// Match reports whether the rule answers a request of kind with prompt.
func (r DialogRule) Match(kind, prompt string) bool {
	if r.Kind != "" && r.Kind != kind {
		return false
	}
	if r.Prompt == "" {
		return true
	}
	re, err := regexp.Compile(r.Prompt)
	return err == nil && re.MatchString(prompt)
}

// Session returns the DevBox's session name, if it has one.
func (d *DevBox) Session(name string) (Session, bool) {
	for _, s := range d.Sessions {
		if s.Name == name {
			return s, true
		}
	}
	return Session{}, false
}

// SameSessions compares two DevBoxes' sessions with their rules.
func SameSessions(a, b []Session) bool {
	return slices.EqualFunc(a, b, func(x, y Session) bool { return x.Name == y.Name && slices.Equal(x.DialogRules, y.DialogRules) })
}

// Runtimes and states a DevBox may name.
const (
	RuntimeQEMU    = "qemu"
	RuntimeProcess = "process"
	StateRunning   = "running"
	StateStopped   = "stopped"
)

type file struct {
	DevBoxes []DevBox `hcl:"devbox,block"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Load reads and parses the spec file at path.
func Load(path string) ([]DevBox, hcl.Diagnostics) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot read DevBox spec",
			Detail: fmt.Sprintf("%v. Pass the path of an existing .hcl spec.", err)}}
	}
	return Parse(path, src)
}

// Parse decodes src (named filename in diagnostics). The DevBoxes are nil exactly when the
// diagnostics hold an error.
func Parse(filename string, src []byte) ([]DevBox, hcl.Diagnostics) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	var out file
	if diags = append(diags, gohcl.DecodeBody(f.Body, nil, &out)...); diags.HasErrors() {
		return nil, diags
	}
	body := f.Body.(*hclsyntax.Body)
	blocks := body.Blocks
	seen := map[string]bool{}
	for i := range out.DevBoxes {
		d := &out.DevBoxes[i]
		d.defaults()
		diags = append(diags, d.check(devboxBlock(blocks, d.Name), seen)...)
	}
	if len(out.DevBoxes) == 0 {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "No devbox block",
			Detail:  `The spec declares no DevBox: add a block such as devbox "alpha" { agent = "main" session "s1" {} }.`,
			Subject: body.MissingItemRange().Ptr()})
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return out.DevBoxes, diags
}

func (d *DevBox) defaults() {
	if d.Runtime == "" {
		d.Runtime = RuntimeQEMU
	}
	if d.State == "" {
		d.State = StateRunning
	}
	if d.Agent == "" {
		d.Agent = "main"
	}
	if d.MemoryMiB == 0 {
		d.MemoryMiB = 1024
	}
}

// check validates the decoded DevBox; b is its block, for the ranges.
func (d *DevBox) check(b *hclsyntax.Block, seen map[string]bool) hcl.Diagnostics {
	var diags hcl.Diagnostics
	errAt := func(attr, summary, format string, args ...any) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary,
			Detail: fmt.Sprintf(format, args...), Subject: attrRange(b, attr)})
	}
	if !nameRE.MatchString(d.Name) {
		errAt("", "Invalid devbox name", "devbox %q: a name is 1-63 of a-z, 0-9 and '-', starting with a letter or digit.", d.Name)
	}
	if seen[d.Name] {
		errAt("", "Duplicate devbox", "devbox %q is declared twice: give each DevBox its own name.", d.Name)
	}
	seen[d.Name] = true
	oneOf := func(attr, v string, allowed ...string) {
		if !slices.Contains(allowed, v) {
			errAt(attr, "Invalid "+attr, "devbox %q: %s = %q; use one of %s.", d.Name, attr, v, strings.Join(allowed, ", "))
		}
	}
	oneOf("runtime", d.Runtime, RuntimeQEMU, RuntimeProcess)
	oneOf("state", d.State, StateRunning, StateStopped)
	if d.MemoryMiB < 256 || d.MemoryMiB > 1<<20 {
		errAt("memory_mib", "Invalid memory_mib", "devbox %q: memory_mib = %d; use 256 to 1048576 (MiB), e.g. 1024.", d.Name, d.MemoryMiB)
	}
	if !nameRE.MatchString(d.Agent) {
		errAt("agent", "Invalid agent", "devbox %q: agent %q: use 1-63 of a-z, 0-9 and '-'.", d.Name, d.Agent)
	}
	names := map[string]bool{}
	for i, s := range d.Sessions {
		at := func(summary, format string, args ...any) {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary,
				Detail: fmt.Sprintf(format, args...), Subject: sessionRange(b, i)})
		}
		if !nameRE.MatchString(s.Name) {
			at("Invalid session name", "devbox %q: session %q: use 1-63 of a-z, 0-9 and '-'.", d.Name, s.Name)
		}
		if names[s.Name] {
			at("Duplicate session", "devbox %q: session %q is declared twice: give each its own name.", d.Name, s.Name)
		}
		names[s.Name] = true
		rules := map[string]bool{}
		for _, r := range s.DialogRules {
			switch {
			case !nameRE.MatchString(r.Name) || rules[r.Name]:
				at("Invalid dialog_rule", "devbox %q: session %q: dialog_rule %q: give each rule its own name of a-z, 0-9 and '-'.", d.Name, s.Name, r.Name)
			case r.Kind != "" && r.Kind != "permission" && r.Kind != "question":
				at("Invalid dialog_rule kind", "devbox %q: session %q: dialog_rule %q: kind = %q; use permission or question, or leave it out for both.", d.Name, s.Name, r.Name, r.Kind)
			case r.Answer == "":
				at("Invalid dialog_rule answer", "devbox %q: session %q: dialog_rule %q: answer is empty; give one of the questions' options, e.g. \"allow\".", d.Name, s.Name, r.Name)
			}
			if _, err := regexp.Compile(r.Prompt); err != nil {
				at("Invalid dialog_rule prompt", "devbox %q: session %q: dialog_rule %q: prompt is not an RE2 regular expression: %v.", d.Name, s.Name, r.Name, err)
			}
			rules[r.Name] = true
		}
	}
	return diags
}

// Check validates a DevBox that did not come from a file (the Gateway's API), after filling in
// the defaults, with the same checks as Parse.
func Check(d *DevBox) error {
	d.defaults()
	if diags := d.check(nil, map[string]bool{}); diags.HasErrors() {
		return errors.New(strings.TrimSpace(Format(diags)))
	}
	return nil
}

// attrRange is where attr is in b (the block's header when absent); nil without a block.
func attrRange(b *hclsyntax.Block, attr string) *hcl.Range {
	if b == nil {
		return nil
	}
	if a, ok := b.Body.Attributes[attr]; ok {
		return a.SrcRange.Ptr()
	}
	return b.DefRange().Ptr()
}

func sessionRange(b *hclsyntax.Block, i int) *hcl.Range {
	if b == nil {
		return nil
	}
	return sessionBlock(b, i).DefRange().Ptr()
}

func devboxBlock(blocks hclsyntax.Blocks, name string) *hclsyntax.Block {
	var last *hclsyntax.Block
	for _, b := range blocks {
		if b.Type == "devbox" && len(b.Labels) == 1 && b.Labels[0] == name {
			last = b // the last one, so that a duplicate points at the second declaration
		}
	}
	return last
}

func sessionBlock(b *hclsyntax.Block, i int) *hclsyntax.Block {
	n := 0
	for _, s := range b.Body.Blocks {
		if s.Type == "session" {
			if n == i {
				return s
			}
			n++
		}
	}
	return b
}

// Format renders diagnostics as "file:line,col: summary; detail", one per line.
func Format(diags hcl.Diagnostics) string {
	var b strings.Builder
	for _, d := range diags {
		if d.Subject != nil {
			fmt.Fprintf(&b, "%s:%d,%d: ", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		fmt.Fprintf(&b, "%s; %s\n", d.Summary, d.Detail)
	}
	return b.String()
}
