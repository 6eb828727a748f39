package spec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/allox-os/allox/internal/limit"
)

// sandboxFlags are the daemon flags a sandbox block renders, with the attribute to write instead.
var sandboxFlags = map[string]string{
	"managed-execution":      "managed_execution = true",
	"share-tools":            "share_tools = true",
	"dialog":                 "dialog = true",
	"session-limits":         "session_limits { ... }",
	"run-limits":             "run_limits { ... }",
	"max-limits":             "max_limits { ... }",
	"runs-memory-reserve":    `runs_memory_reserve = "192MiB"`,
	"session-quota":          `session_quota = "8GiB"`,
	"agent-quota":            `agent_quota = "32GiB"`,
	"max-session-quota":      `max_session_quota = "64GiB"`,
	"store-reserve":          `store_reserve = "256MiB"`,
	"session-network":        `session_network { default = "proxy" }`,
	"session-network-modes":  `session_network { modes = ["isolated", "proxy"] }`,
	"session-network-policy": `session_network { policy = "/etc/allox/session-network/policy" }`,
}

// Flags are the daemon flags the sandbox block renders, in a fixed order.
func (s *Sandbox) Flags() []string {
	if s == nil {
		return nil
	}
	var out []string
	if s.ManagedExecution {
		out = append(out, "--managed-execution")
	}
	if s.ShareTools {
		out = append(out, "--share-tools")
	}
	if s.Dialog {
		out = append(out, "--dialog")
	}
	for _, f := range []struct {
		name string
		set  limit.Set
	}{{"--session-limits", s.SessionLimits}, {"--run-limits", s.RunLimits}, {"--max-limits", s.MaxLimits}} {
		if !f.set.IsZero() {
			out = append(out, f.name+"="+f.set.String())
		}
	}
	if s.RunsMemoryReserve > 0 {
		out = append(out, "--runs-memory-reserve="+strconv.FormatInt(s.RunsMemoryReserve, 10))
	}
	for _, q := range s.quotaAttrs() {
		if *q.v > 0 {
			out = append(out, "--"+q.flag+"="+strconv.FormatInt(*q.v, 10))
		}
	}
	return append(out, s.SessionNetwork.flags()...)
}

// validateSandbox checks that the service's command does not carry the flags the sandbox block
// renders, that only the workspace daemon has a sandbox block, and the limits' ranges and bounds.
func (d *decoder) validateSandbox(key string, s Service) {
	for i, arg := range s.Command {
		name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if fix, ok := sandboxFlags[name]; ok && strings.HasPrefix(arg, "-") && i > 0 {
			d.errorf(fmt.Sprintf("%s.command.%d", key, i), "Flag belongs in the sandbox block",
				"%s is rendered from the service's sandbox block; remove it from command and write sandbox { %s } instead.", arg, fix)
		}
	}
	sb := s.Sandbox
	if sb == nil {
		return
	}
	key += ".sandbox"
	if s.Build != DaemonPackage {
		d.errorf(key, "Sandbox block on another service",
			"a sandbox block configures the workspace daemon's runs (build = %q); service %q is not built from it: move the block to the daemon's service block.", DaemonPackage, s.Name)
	}
	d.validateSessionNetwork(key+".session_network", s)
	if sb.ShareTools && !slices.Contains(s.Plugins, PluginSessionShare) {
		d.errorf(key+".share_tools", "Plugin not installed",
			"share_tools = true needs the session-share plugin in the daemon; add plugins = [%q] to service %q, or remove share_tools.",
			PluginSessionShare, s.Name)
	}
	if sb.Dialog && !slices.Contains(s.Plugins, PluginDialog) {
		d.errorf(key+".dialog", "Plugin not installed",
			"dialog = true needs the dialog plugin in the daemon; add plugins = [%q] to service %q, or remove dialog.",
			PluginDialog, s.Name)
	}
	if sb.MaxSessionQuota > 0 && sb.SessionQuota > sb.MaxSessionQuota {
		d.errorf(key+".session_quota", "Default above the maximum",
			"session_quota (%s) is above max_session_quota (%s, %s); lower the default or raise max_session_quota.",
			limit.FormatSize(sb.SessionQuota), limit.FormatSize(sb.MaxSessionQuota), d.at(key+".max_session_quota"))
	}
	for _, q := range sb.quotaAttrs() {
		if *q.v > 0 && *q.v < 1<<20 {
			d.errorf(key+"."+q.attr, "Quota too small", "%s is %d bytes; give at least 1MiB (sizes take KiB, MiB, GiB, TiB).", q.attr, *q.v)
		}
	}
	for _, l := range []struct {
		block string
		set   limit.Set
	}{{"session_limits", sb.SessionLimits}, {"run_limits", sb.RunLimits}, {"max_limits", sb.MaxLimits}} {
		for _, e := range l.set.Check() {
			d.errorf(key+"."+l.block+"."+e.Field, "Limit out of range", "%s.%s: %s.", l.block, e.Field, e.Reason)
		}
		if l.block == "max_limits" {
			continue
		}
		for _, e := range l.set.Within(sb.MaxLimits) {
			d.errorf(key+"."+l.block+"."+e.Field, "Default above the maximum",
				"%s.%s: %s in max_limits (%s); lower the default or raise max_limits.%s.",
				l.block, e.Field, e.Reason, d.at(key+".max_limits."+e.Field), e.Field)
		}
	}
}
