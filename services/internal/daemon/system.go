package daemon

import (
	"context"
	"errors"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/system"
)

// RegisterSystem registers the system.* actions backed by s.
func RegisterSystem(r *Router, s *system.System) error {
	h := systemHandlers{s}
	return errors.Join(
		r.Register(rpc.ActionSystemInfo, Action{Handler: h.info}),
		r.Register(rpc.ActionSystemKernelConfig, Action{Handler: h.kernelConfig}),
		r.Register(rpc.ActionSystemPowerOff, Action{Handler: h.powerOff, HostOnly: true}),
	)
}

type systemHandlers struct{ sys *system.System }

func (h systemHandlers) info(_ context.Context, c *Call) (any, error) {
	if err := rpc.DecodeParams(c.Params, &struct{}{}); err != nil {
		return nil, err
	}
	info, err := h.sys.Info()
	if err != nil {
		return nil, err
	}
	res := &rpc.SystemInfo{
		Daemon: rpc.DaemonInfo{Version: info.Version},
		Kernel: rpc.KernelInfo{Release: info.Kernel.Release, Version: info.Kernel.Version, Machine: info.Kernel.Machine},
		Store:  rpc.StoreInfo{Root: info.Store.Root, FSType: info.Store.FSType},
		Cgroup: rpc.CgroupInfo{Version: info.Cgroup.Version, Controllers: info.Cgroup.Controllers, SubtreeControl: info.Cgroup.SubtreeControl},
		BootID: info.BootID,
		Sandbox: rpc.SandboxInfo{RunUID: info.Sandbox.RunUID, RunGID: info.Sandbox.RunGID,
			Seccomp: seccompRules(info.Sandbox.Seccomp), GuardedPorts: nonNil(info.Sandbox.GuardedPorts),
			ManagedExecution: info.Sandbox.ManagedExecution},
		Quarantined: []rpc.QuarantinedSession{},
	}
	for _, q := range info.Quarantined {
		res.Quarantined = append(res.Quarantined, rpc.QuarantinedSession{AgentID: q.AgentID, SessionID: q.SessionID, Reason: q.Reason, Since: q.Since})
	}
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
