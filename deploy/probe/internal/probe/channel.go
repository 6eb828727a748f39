package probe

import "context"

// ChannelSupervisor is the seam of the Probe's channel supervision loop (issue 21: ssh_remote
// with ide_primary and terminal_fallback, and dialog). The Probe hands each one every sandbox it
// adopts and withdraws it when the sandbox stops or fences; none is built here, so a Probe
// reports no channels.
type ChannelSupervisor interface {
	Name() string // "ssh_remote" or "dialog", for the Capability Reporter
	// Attach starts supervising the channel of devbox's sandbox; it returns at once and keeps
	// going until ctx ends. Faults come back through report, into the self-heal loop.
	Attach(ctx context.Context, devbox string, sb Sandbox, report func(Fault))
}
