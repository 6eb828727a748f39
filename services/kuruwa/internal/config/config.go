// Package config reads Kuruwa's persistent configuration: the sandbox definitions (a trusted init
// program and its arguments, an optional cleanup program) and the tenants with the definitions
// each may instantiate. It is HCL, decoded against explicit schemas, with diagnostics that point
// at the offending source range and suggest the name that was probably meant.
package config

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// HostDefinition is the built-in definition of the host instance: its init is noop.
const HostDefinition = "host"

// HostTenant is the management entry's tenant.
const HostTenant = "host"

// Definition is a trusted environment-initialisation spec. The instance daemon's command line is
// appended to Init; an empty Init (the host definition) runs the instance daemon directly.
type Definition struct {
	Name         string
	Kind         string // KindCommand (init runs the instance daemon) or KindAlloxSession
	Init         []string
	Cleanup      []string
	ReadyTimeout time.Duration
	// Session is set for KindAlloxSession: where the session's runs are started.
	Session *SessionDef
}

// Definition kinds.
const (
	// KindCommand: the trusted init builds the final environment and runs the instance daemon.
	KindCommand = "command"
	// KindAlloxSession: the instances' terminals are runs of an Allox session (process.exec on the
	// workspace daemon): its current/ as HOME, its cgroup, limits and network mode, ended by its
	// rollback with kill_processes. The instance daemon runs beside the workspace daemon and only
	// brokers; each instance names its agent and session when it is created.
	KindAlloxSession = "allox_session"
)

// Kinds are the definition kinds.
var Kinds = []string{KindCommand, KindAlloxSession}

// SessionDef is an allox_session definition's workspace daemon.
type SessionDef struct {
	// Daemon is the workspace daemon's control listener: "http://HOST:PORT".
	Daemon string
	// TokenFile holds the bearer token the endpoint wants ("" for the guest's loopback listener).
	TokenFile string
	// Agent, when set, is the only agent whose sessions the definition's instances may use.
	Agent string
}

func hostDefinition() Definition {
	return Definition{Name: HostDefinition, Kind: KindCommand, ReadyTimeout: 5 * time.Second}
}

// Tenant is a declared tenant and the definitions it may instantiate.
type Tenant struct {
	Name        string
	Definitions []string
}

// Config is the whole file.
type Config struct {
	Definitions map[string]Definition
	Tenants     map[string]Tenant
}

// Vars are the values expressions may use: runtime_dir (the daemon's directory, to hide it from
// terminals) and kuruwa (the path of kuruwad, the program that reads this file and runs the
// instance daemons).
type Vars struct {
	RuntimeDir string
	Kuruwa     string
}

var rootSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
	{Type: "definition", LabelNames: []string{"name"}},
	{Type: "tenant", LabelNames: []string{"name"}},
}}

var definitionSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "kind"}, {Name: "init"}, {Name: "cleanup"}, {Name: "ready_timeout"},
	{Name: "daemon"}, {Name: "token_file"}, {Name: "agent"},
}}

var tenantSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "definitions"}}}

// Parse decodes src (named filename in diagnostics).
func Parse(src []byte, filename string, vars Vars) (*Config, hcl.Diagnostics) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.Pos{Line: 1, Column: 1})
	if diags.HasErrors() {
		return nil, diags
	}
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{
		"runtime_dir": cty.StringVal(vars.RuntimeDir), "kuruwa": cty.StringVal(vars.Kuruwa),
	}}
	content, d := f.Body.Content(rootSchema)
	diags = append(diags, d...)
	cfg := &Config{
		Definitions: map[string]Definition{HostDefinition: hostDefinition()},
		Tenants:     map[string]Tenant{},
	}
	defRanges := map[string]hcl.Range{}
	var tenantBlocks []*hcl.Block
	for _, b := range content.Blocks {
		name := b.Labels[0]
		if err := checkName(name); err != nil {
			diags = append(diags, diag(fmt.Sprintf("Invalid %s name", b.Type), err.Error(), b.LabelRanges[0]))
			continue
		}
		switch b.Type {
		case "definition":
			if name == HostDefinition {
				diags = append(diags, diag("Reserved definition name", `"host" is the built-in noop definition of the host instance; choose another name.`, b.LabelRanges[0]))
				continue
			}
			if prev, dup := defRanges[name]; dup {
				diags = append(diags, diag("Duplicate definition", fmt.Sprintf("definition %q is already declared at %s; rename or remove one.", name, prev), b.LabelRanges[0]))
				continue
			}
			defRanges[name] = b.DefRange
			def, d := decodeDefinition(name, b.Body, ctx)
			diags = append(diags, d...)
			cfg.Definitions[name] = def
		case "tenant":
			tenantBlocks = append(tenantBlocks, b)
		}
	}
	for _, b := range tenantBlocks {
		t, d := decodeTenant(b, ctx, cfg)
		diags = append(diags, d...)
		if _, dup := cfg.Tenants[t.Name]; dup {
			diags = append(diags, diag("Duplicate tenant", fmt.Sprintf("tenant %q is already declared; rename or remove one.", t.Name), b.LabelRanges[0]))
			continue
		}
		cfg.Tenants[t.Name] = t
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return cfg, diags
}

func decodeDefinition(name string, body hcl.Body, ctx *hcl.EvalContext) (Definition, hcl.Diagnostics) {
	def := Definition{Name: name, Kind: KindCommand, ReadyTimeout: 5 * time.Second}
	c, diags := body.Content(definitionSchema)
	if a, ok := c.Attributes["kind"]; ok {
		if d := gohcl.DecodeExpression(a.Expr, ctx, &def.Kind); d.HasErrors() {
			diags = append(diags, d...)
		} else if !slices.Contains(Kinds, def.Kind) {
			diags = append(diags, diag("Unknown definition kind", fmt.Sprintf("kind %q: use %q (an init that runs the instance daemon) or %q (terminals that are runs of an Allox session).%s", def.Kind, KindCommand, KindAlloxSession, didYouMean(def.Kind, Kinds)), a.Expr.Range()))
		}
	}
	if def.Kind == KindAlloxSession {
		return decodeSessionDef(def, c, body, ctx, diags)
	}
	for _, n := range []string{"daemon", "token_file", "agent"} {
		if a, ok := c.Attributes[n]; ok {
			diags = append(diags, diag("Attribute of another kind", fmt.Sprintf("%s belongs to kind = %q definitions; add that kind or remove %s.", n, KindAlloxSession, n), a.NameRange))
		}
	}
	if _, ok := c.Attributes["init"]; !ok {
		diags = append(diags, diag("Missing required argument", `The argument "init" is required: the trusted init program and its arguments, e.g. ["bwrap", "--ro-bind", "/", "/", "--"] (or kind = "allox_session").`, body.MissingItemRange()))
	}
	if a, ok := c.Attributes["init"]; ok {
		diags = append(diags, gohcl.DecodeExpression(a.Expr, ctx, &def.Init)...)
		if len(def.Init) == 0 && !diags.HasErrors() {
			diags = append(diags, diag("Empty init", `init must name the trusted init program and its arguments, e.g. ["bwrap", "--ro-bind", "/", "/", "--"]; the instance daemon's command is appended.`, a.Expr.Range()))
		}
	}
	if a, ok := c.Attributes["cleanup"]; ok {
		diags = append(diags, gohcl.DecodeExpression(a.Expr, ctx, &def.Cleanup)...)
	}
	diags = append(diags, decodeReadyTimeout(c, ctx, &def)...)
	return def, diags
}

// decodeSessionDef decodes the rest of a kind = "allox_session" definition: it has no init (its
// instance daemon runs directly, beside the workspace daemon) and names that daemon.
func decodeSessionDef(def Definition, c *hcl.BodyContent, body hcl.Body, ctx *hcl.EvalContext, diags hcl.Diagnostics) (Definition, hcl.Diagnostics) {
	def.Session = &SessionDef{}
	for _, n := range []string{"init", "cleanup"} {
		if a, ok := c.Attributes[n]; ok {
			diags = append(diags, diag("Attribute of another kind", fmt.Sprintf("an allox_session definition has no %s: its terminals are runs of the session, started by the workspace daemon; remove %s.", n, n), a.NameRange))
		}
	}
	a, ok := c.Attributes["daemon"]
	if !ok {
		return def, append(diags, diag("Missing required argument", `an allox_session definition needs daemon, the workspace daemon's control listener, e.g. daemon = "http://127.0.0.1:8092".`, body.MissingItemRange()))
	}
	if d := gohcl.DecodeExpression(a.Expr, ctx, &def.Session.Daemon); d.HasErrors() {
		diags = append(diags, d...)
	} else if err := CheckDaemon(def.Session.Daemon); err != nil {
		diags = append(diags, diag("Invalid daemon", err.Error(), a.Expr.Range()))
	}
	if a, ok := c.Attributes["token_file"]; ok {
		if d := gohcl.DecodeExpression(a.Expr, ctx, &def.Session.TokenFile); d.HasErrors() {
			diags = append(diags, d...)
		} else if !filepath.IsAbs(def.Session.TokenFile) {
			diags = append(diags, diag("Invalid token_file", fmt.Sprintf("token_file %q must be an absolute path, e.g. \"/run/allox/rpc-token\".", def.Session.TokenFile), a.Expr.Range()))
		}
	}
	if a, ok := c.Attributes["agent"]; ok {
		if d := gohcl.DecodeExpression(a.Expr, ctx, &def.Session.Agent); d.HasErrors() {
			diags = append(diags, d...)
		} else if def.Session.Agent == "" {
			diags = append(diags, diag("Empty agent", "agent pins the agent whose sessions the instances use; name one or remove the attribute.", a.Expr.Range()))
		}
	}
	diags = append(diags, decodeReadyTimeout(c, ctx, &def)...)
	return def, diags
}

func decodeReadyTimeout(c *hcl.BodyContent, ctx *hcl.EvalContext, def *Definition) hcl.Diagnostics {
	a, ok := c.Attributes["ready_timeout"]
	if !ok {
		return nil
	}
	var s string
	if d := gohcl.DecodeExpression(a.Expr, ctx, &s); d.HasErrors() {
		return d
	}
	dur, err := time.ParseDuration(s)
	if err != nil || dur <= 0 || dur > 10*time.Minute {
		return hcl.Diagnostics{diag("Invalid ready_timeout", fmt.Sprintf("ready_timeout %q must be a duration between 1ms and 10m, e.g. \"5s\".", s), a.Expr.Range())}
	}
	def.ReadyTimeout = dur
	return nil
}

// CheckDaemon checks a workspace daemon endpoint: "http://HOST:PORT" (or https).
func CheckDaemon(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Path != "" && u.Path != "/" {
		return fmt.Errorf("daemon %q: use \"http://HOST:PORT\", the workspace daemon's control listener (e.g. \"http://127.0.0.1:8092\", the guest's loopback listener)", s)
	}
	return nil
}

func decodeTenant(b *hcl.Block, ctx *hcl.EvalContext, cfg *Config) (Tenant, hcl.Diagnostics) {
	t := Tenant{Name: b.Labels[0]}
	var diags hcl.Diagnostics
	if t.Name == HostTenant {
		return t, hcl.Diagnostics{diag("Reserved tenant name", `"host" is the management entry's tenant; choose another name.`, b.LabelRanges[0])}
	}
	c, d := b.Body.Content(tenantSchema)
	diags = append(diags, d...)
	a, ok := c.Attributes["definitions"]
	if !ok {
		return t, diags
	}
	if d := gohcl.DecodeExpression(a.Expr, ctx, &t.Definitions); d.HasErrors() {
		return t, append(diags, d...)
	}
	known := make([]string, 0, len(cfg.Definitions))
	for n := range cfg.Definitions {
		known = append(known, n)
	}
	sort.Strings(known)
	for _, n := range t.Definitions {
		if _, ok := cfg.Definitions[n]; !ok {
			diags = append(diags, diag("Unknown definition", fmt.Sprintf("tenant %q names definition %q, which is not declared.%s", t.Name, n, didYouMean(n, known)), a.Expr.Range()))
		}
	}
	return t, diags
}

func diag(summary, detail string, r hcl.Range) *hcl.Diagnostic {
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: &r}
}

// checkName accepts names usable as socket directory names and CLI arguments: 1 to 32 of
// A-Z a-z 0-9 . _ -, starting with a letter or digit.
func checkName(n string) error {
	if n == "" || len(n) > 32 {
		return fmt.Errorf("name %q must be 1 to 32 characters", n)
	}
	for i, r := range n {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || r != '-' && r != '_' && r != '.') {
			return fmt.Errorf("name %q may only hold letters, digits, '.', '_' and '-', and must start with a letter or digit", n)
		}
	}
	return nil
}

// CheckName is the rule for tenant, instance and terminal names.
func CheckName(n string) error { return checkName(n) }

func didYouMean(given string, options []string) string {
	best, bestDist := "", 0
	for _, o := range options {
		if d := levenshtein.Distance(given, o, nil); best == "" || d < bestDist {
			best, bestDist = o, d
		}
	}
	if best == "" || bestDist >= max(3, len(given)/3) || bestDist >= len(given) {
		return ""
	}
	return fmt.Sprintf(" Did you mean %q?", best)
}
