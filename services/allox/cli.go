package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/allox-os/allox/internal/rpc"
)

// errUsage marks a command line that does not parse (exit status 2).
var errUsage = errors.New("usage")

type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errUsage }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// defaultSocket is where a sandboxed run reaches its session's socket.
const defaultSocket = "/run/allox/session.sock"

// caller calls one action on the session socket and prints its result.
type caller struct {
	client *rpc.Client
	socket string
	stdout io.Writer
	stderr io.Writer
}

func (c *caller) call(ctx context.Context, action string, params any) error {
	var res json.RawMessage
	if err := c.client.Call(ctx, action, params, &res); err != nil {
		return c.explain(action, err)
	}
	return printJSON(c.stdout, res)
}

// explain makes a failed call one line that says what to do.
func (c *caller) explain(action string, err error) error {
	var re *rpc.Error
	if !errors.As(err, &re) {
		if _, serr := os.Stat(c.socket); serr != nil {
			return fmt.Errorf("%s: no session socket at %s: run allox inside a run of a session (process.start), or set ALLOX_SESSION_SOCKET", action, c.socket)
		}
	}
	return lineError{action, err}
}

// lineError is a failed call as one line, keeping the wire error for errors.As.
type lineError struct {
	action string
	err    error
}

func (e lineError) Error() string { return e.action + ": " + oneLine(e.err.Error()) }
func (e lineError) Unwrap() error { return e.err }

func printJSON(w io.Writer, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("the daemon's result is not JSON: %w", err)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// command is one top-level subcommand.
type command struct {
	name, usage string
	run         func(ctx context.Context, c *caller, args []string, stdin io.Reader) error
}

// commands are the client's subcommands: the core's, then the plugins'.
func commands() []command {
	core := []command{
		{"session", "session info", sessionCmd},
		{"turn", "turn begin ID [--label KEY=VALUE]... | turn end ID [--failed]", turnCmd},
		{"call", "call ACTION [JSON|-]", callCmd},
		{"relay", "relay [--ready] tcp HOST PORT | relay [--ready] unix PATH", relayCmd},
		{"sftp-server", "sftp-server", sftpServerCmd},
	}
	for _, p := range plugins {
		core = append(core, p.command())
	}
	return core
}

func usage() string {
	var lines []string
	for _, c := range commands() {
		lines = append(lines, "allox "+c.usage)
	}
	return strings.Join(lines, "; ")
}

// run is the whole client; main only maps its error to an exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("name a subcommand: %s", usage())
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stderr, "usage: "+strings.ReplaceAll(usage(), "; ", "\n       "))
		return nil
	}
	socket := os.Getenv("ALLOX_SESSION_SOCKET")
	if socket == "" {
		socket = defaultSocket
	}
	c := &caller{client: rpc.NewUnixClient(socket), socket: socket, stdout: stdout, stderr: stderr}
	for _, cmd := range commands() {
		if cmd.name == args[0] {
			return cmd.run(ctx, c, args[1:], stdin)
		}
	}
	return usagef("unknown subcommand %q: use %s", args[0], usage())
}

func sessionCmd(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	if len(args) != 1 || args[0] != "info" {
		return usagef("use: allox session info")
	}
	return c.call(ctx, rpc.ActionSessionInfo, nil)
}

func turnCmd(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	switch {
	case len(args) >= 2 && args[0] == "begin":
		labels := map[string]string{}
		for rest := args[2:]; len(rest) > 0; rest = rest[2:] {
			k, v, ok := "", "", false
			if len(rest) >= 2 && rest[0] == "--label" {
				k, v, ok = strings.Cut(rest[1], "=")
			}
			if !ok || k == "" {
				return usagef("use: allox turn begin ID [--label KEY=VALUE]..., e.g. allox turn begin 7 --label task=fix-tests")
			}
			labels[k] = v
		}
		p := map[string]any{"turn_id": args[1]}
		if len(labels) > 0 {
			p["labels"] = labels
		}
		return c.call(ctx, rpc.ActionTurnBegin, p)
	case len(args) >= 2 && args[0] == "end" && (len(args) == 2 || len(args) == 3 && args[2] == "--failed"):
		return c.call(ctx, rpc.ActionTurnEnd, map[string]any{"turn_id": args[1], "success": len(args) == 2})
	}
	return usagef("use: allox turn begin ID, or allox turn end ID [--failed] (a turn that ends --failed is not checkpointed)")
}

func callCmd(ctx context.Context, c *caller, args []string, stdin io.Reader) error {
	if len(args) < 1 || len(args) > 2 {
		return usagef("use: allox call ACTION [JSON], e.g. allox call session.info '{}' (JSON - reads the params from stdin)")
	}
	params := json.RawMessage("{}")
	if len(args) == 2 {
		params = json.RawMessage(args[1])
		if args[1] == "-" {
			b, err := io.ReadAll(io.LimitReader(stdin, rpc.MaxRequestBytes+1))
			if err != nil {
				return fmt.Errorf("read params from stdin: %w", err)
			}
			params = b
		}
		if !json.Valid(params) {
			return usagef("allox call %s: the params are not JSON: give an object, e.g. '{\"turn_id\":\"1\"}'", args[0])
		}
	}
	return c.call(ctx, args[0], params)
}
