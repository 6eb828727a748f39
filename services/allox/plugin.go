package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/allox-os/allox/internal/rpc"
)

// plugin is a daemon plugin whose actions the client has subcommands for. Until a plugin gives
// its subcommands typed arguments, "allox NAME SUB ARGS..." calls the action NAME.SUB with
// {"args": [ARGS...]}; when the daemon does not know the action, the plugin is not enabled, and
// the client says how it is enabled.
type plugin struct {
	name   string // the subcommand and the actions' domain, e.g. "share"
	title  string // what it is, e.g. "session share"
	enable string // the daemon's flag that enables it
	subs   string // its subcommands, for usage
	// typed are the subcommands with typed arguments of their own, by name; the others call
	// NAME.SUB with {"args": [...]}.
	typed map[string]func(ctx context.Context, c *caller, args []string, stdin io.Reader) error
}

// plugins are the daemon's plugins the client knows.
var plugins = []plugin{
	{name: "share", title: "session share", enable: "--share-tools", subs: "enable [--scope DIR] [--permission read|write] | disable | status | ls TARGET [PATH] | stat TARGET PATH | read TARGET PATH [-o FILE] | write TARGET PATH [-i FILE]",
		typed: shareTyped},
	{name: "network", title: "session network", enable: "--session-network isolated|proxy", subs: "connect HOST PORT",
		typed: map[string]func(context.Context, *caller, []string, io.Reader) error{"connect": networkConnect}},
	{name: "monitor", title: "monitor", enable: "--monitor-root DIR", subs: monitorSubs, typed: monitorTyped},
	{name: "dialog", title: "dialog", enable: "--dialog", subs: "ask [--question] [--option X]... --default X [--timeout S] PROMPT | hook claude-code|codex [--default allow|deny|ask]",
		typed: dialogTyped},
}

func (p plugin) command() command {
	return command{name: p.name, usage: p.name + " " + p.subs, run: p.run}
}

func (p plugin) run(ctx context.Context, c *caller, args []string, stdin io.Reader) error {
	if len(args) == 0 {
		return usagef("use: allox %s %s", p.name, p.subs)
	}
	var err error
	if typed, ok := p.typed[args[0]]; ok {
		err = typed(ctx, c, args[1:], stdin)
	} else {
		action := p.name + "." + args[0]
		rest := append([]string{}, args[1:]...)
		err = c.call(ctx, action, map[string]any{"args": rest})
	}
	if isUnknownAction(err) {
		return fmt.Errorf("%s: the %s plugin is not enabled in this appliance: the workspace daemon enables it with %s", p.name, p.title, p.enable)
	}
	return err
}

// isUnknownAction reports whether the daemon does not know the action called.
func isUnknownAction(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Code == rpc.CodeUnknownAction
}
