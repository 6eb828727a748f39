package daemon

import (
	"context"
	"errors"
	"slices"

	"github.com/allox-os/allox/internal/limit"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/system"
	"github.com/allox-os/allox/services/internal/tracked"
	"github.com/allox-os/allox/services/internal/workspace"
)

// RegisterSystem registers the system.* actions backed by s.
func RegisterSystem(r *Router, s *system.System) error { return RegisterSystemWith(r, s, nil, nil) }

// RegisterSystemWith registers the system.* actions backed by s; system.info also reports the
// limits in force in ws (nil with --system-only) and the daemon's plugins (plugin.Describe).
func RegisterSystemWith(r *Router, s *system.System, ws *workspace.Service, plugins []plugin.Info) error {
	h := systemHandlers{s, ws, plugins}
	return errors.Join(
		r.Register(rpc.ActionSystemInfo, Action{Handler: h.info, ReadOnly: true}),
		r.Register(rpc.ActionSystemKernelConfig, Action{Handler: h.kernelConfig, ReadOnly: true}),
		r.Register(rpc.ActionSystemPowerOff, Action{Handler: h.powerOff, Scope: ScopeHost}),
	)
}

type systemHandlers struct {
	sys     *system.System
	ws      *workspace.Service
	plugins []plugin.Info
}

func (h systemHandlers) info(_ context.Context, c *Call) (any, error) {
	if err := rpc.DecodeParams(c.Params, &struct{}{}); err != nil {
		return nil, err
	}
	info, err := h.sys.Info()
	if err != nil {
		return nil, err
	}
	res := &rpc.SystemInfo{
		Daemon: rpc.DaemonInfo{Version: info.Version, Pid: info.Self.Pid, Cgroup: info.Self.Cgroup,
			MemoryMin: info.Self.MemoryMin, MemoryLow: info.Self.MemoryLow, OOMScoreAdj: info.Self.OOMScoreAdj},
		Kernel: rpc.KernelInfo{Release: info.Kernel.Release, Version: info.Kernel.Version, Machine: info.Kernel.Machine},
		Store:  rpc.StoreInfo{Root: info.Store.Root, FSType: info.Store.FSType},
		Cgroup: rpc.CgroupInfo{Version: info.Cgroup.Version, Controllers: info.Cgroup.Controllers, SubtreeControl: info.Cgroup.SubtreeControl},
		BootID: info.BootID,
		Sandbox: rpc.SandboxInfo{RunUID: info.Sandbox.RunUID, RunGID: info.Sandbox.RunGID,
			Seccomp: seccompRules(info.Sandbox.Seccomp), GuardedPorts: nonNil(info.Sandbox.GuardedPorts),
			ManagedExecution: info.Sandbox.ManagedExecution},
		Tasks:       info.Tasks,
		Limits:      limitsInfo(h.ws),
		Quarantined: []rpc.QuarantinedSession{},
		Plugins:     []rpc.PluginInfo{},
	}
	for _, p := range h.plugins {
		pi := rpc.PluginInfo{Name: p.Name, Installed: p.Installed, Enabled: p.Enabled, Flag: p.Flag}
		if p.Installed {
			pi.APIVersion, pi.Version = p.API, p.Version
		}
		res.Plugins = append(res.Plugins, pi)
	}
	for _, q := range info.Quarantined {
		res.Quarantined = append(res.Quarantined, rpc.QuarantinedSession{AgentID: q.AgentID, SessionID: q.SessionID, Reason: q.Reason, Since: q.Since})
	}
	res.Store.Quota = storeQuota(h.ws)
	if info.Image != nil {
		res.Image = &rpc.ImageInfo{Name: info.Image.Name, Version: info.Image.Version}
	}
	return res, nil
}

func (h systemHandlers) kernelConfig(_ context.Context, c *Call) (any, error) {
	if err := rpc.DecodeParams(c.Params, &struct{}{}); err != nil {
		return nil, err
	}
	config, err := h.sys.KernelConfig()
	if err != nil {
		return nil, err
	}
	return &rpc.KernelConfig{Config: config}, nil
}

// powerOff replies first and then signals init: the client learns that the request was accepted
// before the guest goes down. The router has already refused it on the loopback listener.
func (h systemHandlers) powerOff(_ context.Context, c *Call) (any, error) {
	if err := rpc.DecodeParams(c.Params, &struct{}{}); err != nil {
		return nil, err
	}
	if err := h.sys.CheckPowerOff(); err != nil {
		return nil, err
	}
	c.AfterResponse(h.sys.PowerOff)
	return struct{}{}, nil
}

// nonNil makes an absent list an empty one on the wire.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func seccompRules(rs []system.SeccompRule) []rpc.SeccompRule {
	out := make([]rpc.SeccompRule, 0, len(rs))
	for _, r := range rs {
		args := make([]rpc.SeccompArg, 0, len(r.Args))
		for _, a := range r.Args {
			args = append(args, rpc.SeccompArg{Index: a.Index, Op: a.Op, Value: a.Value})
		}
		out = append(out, rpc.SeccompRule{Syscall: r.Syscall, Number: r.Number, When: r.When, Args: args, Errno: r.Errno})
	}
	return out
}

// storeQuota reports the store-wide quota (3/1); nil with quotas off or without a workspace
// runtime.
func storeQuota(ws *workspace.Service) *rpc.Quota {
	if ws == nil {
		return nil
	}
	q, ok, err := ws.StoreQuota()
	if err != nil || !ok {
		return nil
	}
	return wireQuota(q)
}

// limitsInfo reports which limits ws applies; nil without a workspace runtime.
func limitsInfo(ws *workspace.Service) *rpc.LimitsInfo {
	if ws == nil {
		return nil
	}
	out := &rpc.LimitsInfo{Controllers: ws.Controllers(), Enforced: ws.EnforcedLimits(), Skipped: []string{},
		RunDefaults: ws.RunLimits(), RunsMemoryMax: ws.RunsMemoryMax(), RunOOMScoreAdj: tracked.RunOOMScoreAdj}
	if out.Controllers == nil {
		out.Controllers = []string{}
	}
	if out.Enforced == nil {
		out.Enforced = []string{}
	}
	for _, f := range limit.Fields {
		if !slices.Contains(out.Enforced, f) {
			out.Skipped = append(out.Skipped, f)
		}
	}
	if defaults, max, ok := ws.LimitBounds(); ok {
		out.SessionDefaults, out.Max = defaults, max
	}
	return out
}
