package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// DefaultSettle is the pause between pasted text and the keys that follow it; agent TUIs take an
// Enter within about 120 ms of a paste as part of the paste.
const DefaultSettle = 200 * time.Millisecond

func verbs() map[string]verb {
	return map[string]verb{
		"daemon":         {flags: map[string]bool{"config": true, "dir": true, "verbose": false}, run: runDaemon, help: "--dir DIR [--config FILE]: run the main daemon (kuruwad)"},
		"start":          {flags: startFlags, run: start, help: "NAME --instance I [--cols C --rows R --cwd D --env K=V] [-- CMD...]: start a terminal"},
		"run":            {flags: startFlags, run: runVerb, help: "NAME --instance I [-- CMD...]: start, stream output, exit with its status", stream: true},
		"resume":         {flags: map[string]bool{"from": true}, run: resume, help: "NAME [--from OFFSET]: follow output until exit, exit with its status", stream: true},
		"status":         {flags: map[string]bool{"json": false}, run: status, help: "[NAME]: a terminal's state and exit status, or who this entry is"},
		"ls":             {flags: map[string]bool{"json": false, "instances": false}, run: ls, help: "[--instances] [--json]: the terminals (and instances) this entry may use"},
		"send":           {flags: map[string]bool{"key": true, "settle": true, "enter": false}, run: send, help: "NAME [TEXT] [--key KEY]... [--enter] [--settle 200ms]: type text, then keys"},
		"screen":         {flags: map[string]bool{"json": false, "scrollback": false, "plain": false}, run: screen, help: "NAME [--scrollback] [--plain|--json]: the viewport with cursor and alternate-screen flag"},
		"tail":           {flags: map[string]bool{"from": true, "follow": false, "f": false}, run: tail, help: "NAME [--from OFFSET] [-f]: output since OFFSET; prints the next offset on stderr", stream: true},
		"transcript":     {run: transcript, help: "NAME: the raw output since the start", stream: true},
		"resize":         {run: resize, help: "NAME COLSxROWS: resize the terminal"},
		"cancel":         {flags: map[string]bool{"signal": true}, run: cancel, help: "NAME [--signal TERM]: signal the terminal's process group"},
		"clean":          {flags: map[string]bool{"force": false, "instance": true}, run: clean, help: "NAME [--force] | --instance I [--force]: remove a terminal or an instance"},
		"gc":             {run: gc, help: "remove exited terminals and dead instances this entry manages"},
		"attach":         {run: attach, help: "NAME: interactive attach (management entry or instance owner); detach with C-\\", stream: true},
		"skill":          {run: skill, help: "print a usage guide for agents"},
		"instance start": {flags: map[string]bool{"name": true, "agent": true, "session": true}, run: instanceStart, help: "DEFINITION [--name N] [--agent A --session S]: create a sandbox instance (in an Allox session for an allox_session definition)"},
		"instance ls":    {flags: map[string]bool{"json": false}, run: instanceLs, help: "list instances"},
		"tenant add":     {run: tenantAdd, help: "NAME: create a tenant and its entry (management entry)"},
		"tenant rm":      {run: tenantRm, help: "NAME: remove a tenant, closing its connections"},
		"tenant ls":      {flags: map[string]bool{"json": false}, run: tenantLs, help: "tenants, their grants, entries and connected peers"},
		"grant":          {flags: grantFlags, run: grantVerb("grant"), help: "TENANT --definition D | --instance I | --terminal T"},
		"revoke":         {flags: grantFlags, run: grantVerb("revoke"), help: "TENANT --definition D | --instance I | --terminal T: closes live connections that relied on it"},
	}
}

func sortedVerbs(vs map[string]verb) []string { return slices.Sorted(maps.Keys(vs)) }

var startFlags = map[string]bool{"instance": true, "cols": true, "rows": true, "cwd": true, "env": true, "json": false}
var grantFlags = map[string]bool{"definition": true, "instance": true, "terminal": true}

func startArgs(inv *invocation, verb string) (wire.StartArgs, error) {
	name, err := needName(inv, verb)
	if err != nil {
		return wire.StartArgs{}, err
	}
	if len(inv.pos) > 1 {
		return wire.StartArgs{}, usagef("%s: put the command after --: kuruwa %s %s --instance I -- %s", verb, verb, name, strings.Join(inv.pos[1:], " "))
	}
	if !inv.has("instance") {
		return wire.StartArgs{}, usagef("%s needs --instance (the host instance is \"host\"; kuruwa instance ls lists them)", verb)
	}
	a := wire.StartArgs{Name: name, Instance: inv.one("instance"), Argv: inv.rest, Dir: inv.one("cwd"), Env: inv.vals["env"]}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"cols", &a.Cols}, {"rows", &a.Rows}} {
		if s := inv.one(f.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 1000 {
				return a, usagef("--%s %q: must be a number from 1 to 1000", f.name, s)
			}
			*f.dst = n
		}
	}
	return a, nil
}

func start(_ context.Context, c *Context, inv *invocation) error {
	a, err := startArgs(inv, "start")
	if err != nil {
		return err
	}
	var info wire.TermInfo
	if err := c.call(inv, "start", a, &info); err != nil {
		return err
	}
	if inv.has("json") {
		return json.NewEncoder(c.Stdout).Encode(info)
	}
	fmt.Fprintf(c.Stdout, "%s\t%s\tinstance=%s\tpid=%d\n", info.Name, info.ID, info.Instance, info.PID)
	return nil
}

func runVerb(ctx context.Context, c *Context, inv *invocation) error {
	a, err := startArgs(inv, "run")
	if err != nil {
		return err
	}
	var info wire.TermInfo
	if err := c.call(inv, "start", a, &info); err != nil {
		return err
	}
	return c.follow(ctx, inv, a.Name, info.ID, 0, true)
}

func resume(ctx context.Context, c *Context, inv *invocation) error {
	name, err := needName(inv, "resume")
	if err != nil {
		return err
	}
	from, err := offsetFlag(inv)
	if err != nil {
		return err
	}
	return c.follow(ctx, inv, name, "", from, true)
}

func offsetFlag(inv *invocation) (uint64, error) {
	s := inv.one("from")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usagef("--from %q: must be an output offset (a number printed by tail)", s)
	}
	return n, nil
}

// follow streams output to stdout from offset from. With wait it lasts until the program exits
// and returns its status as an *ExitError (nil for 0).
func (c *Context) follow(ctx context.Context, inv *invocation, name, id string, from uint64, wait bool) error {
	conn, closeConn, err := c.openStream(ctx, inv, "tail", wire.TailArgs{Name: name, ID: id, From: from, Follow: wait})
	if err != nil {
		return err
	}
	defer closeConn()
	next := from
	err = frames(conn, func(f wire.Frame) (bool, error) {
		if _, err := c.Stdout.Write(f.Output); err != nil {
			return true, err
		}
		if f.Next > 0 {
			next = f.Next
		}
		if !f.End {
			return false, nil
		}
		fmt.Fprintf(c.Stderr, "kuruwa: next offset %d\n", next)
		if f.Exit != nil && *f.Exit != 0 {
			return true, &ExitError{Code: *f.Exit}
		}
		return true, nil
	})
	if _, ok := err.(*streamClosed); ok {
		return fmt.Errorf("tail %s: connection closed at offset %d (resume with --from %d): %w", name, next, next, err)
	}
	return err
}

// openStream connects, starts a streaming operation and returns the connection (closed when
// ctx ends) and its closer.
func (c *Context) openStream(ctx context.Context, inv *invocation, op string, args any) (*wire.Conn, func(), error) {
	conn, err := c.dial(inv)
	if err != nil {
		return nil, nil, err
	}
	if err := conn.Call(op, args, nil); err != nil {
		conn.Close()
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	return conn, func() { stop(); conn.Close() }, nil
}

// streamClosed is a stream that ended without its end frame.
type streamClosed struct{ err error }

func (e *streamClosed) Error() string { return e.err.Error() }
func (e *streamClosed) Unwrap() error { return e.err }

// frames hands each frame to f until f reports done; an error frame ends it with that error.
func frames(conn *wire.Conn, f func(wire.Frame) (bool, error)) error {
	for {
		var fr wire.Frame
		if err := conn.Recv(&fr); err != nil {
			return &streamClosed{err}
		}
		if fr.Error != nil {
			return fr.Error
		}
		if done, err := f(fr); done || err != nil {
			return err
		}
	}
}

func send(_ context.Context, c *Context, inv *invocation) error {
	name, err := needName(inv, "send")
	if err != nil {
		return err
	}
	a := wire.SendArgs{Name: name, Text: strings.Join(append(inv.pos[1:], inv.rest...), " "), Keys: inv.vals["key"]}
	if inv.has("enter") {
		a.Keys = append(a.Keys, "Enter")
	}
	if a.Text == "" && len(a.Keys) == 0 {
		return usagef("send needs text or --key: kuruwa send %s 'make test' --key Enter", name)
	}
	settle := DefaultSettle
	if s := inv.one("settle"); s != "" {
		if settle, err = time.ParseDuration(s); err != nil || settle < 0 || settle > 10*time.Second {
			return usagef("--settle %q: must be a duration from 0 to 10s, e.g. 200ms", s)
		}
	} else if s := c.Getenv("KURUWA_SETTLE"); s != "" {
		if settle, err = time.ParseDuration(s); err != nil || settle < 0 || settle > 10*time.Second {
			return usagef("KURUWA_SETTLE=%q: must be a duration from 0 to 10s, e.g. 200ms", s)
		}
	}
	a.SettleMS = int(settle / time.Millisecond)
	return c.call(inv, "send", a, nil)
}

func resize(_ context.Context, c *Context, inv *invocation) error {
	if len(inv.pos) != 2 {
		return usagef("resize needs a name and a size: kuruwa resize NAME 120x40")
	}
	cs, rs, _ := strings.Cut(inv.pos[1], "x")
	cols, err1 := strconv.Atoi(cs)
	rows, err2 := strconv.Atoi(rs)
	if err1 != nil || err2 != nil {
		return usagef("size %q: write COLSxROWS, e.g. 120x40", inv.pos[1])
	}
	return c.call(inv, "resize", map[string]any{"name": inv.pos[0], "cols": cols, "rows": rows}, nil)
}

func cancel(_ context.Context, c *Context, inv *invocation) error {
	name, err := needName(inv, "cancel")
	if err != nil {
		return err
	}
	return c.call(inv, "cancel", map[string]any{"name": name, "signal": inv.one("signal")}, nil)
}

func clean(_ context.Context, c *Context, inv *invocation) error {
	a := wire.CleanArgs{Instance: inv.one("instance"), Force: inv.has("force")}
	if a.Instance == "" {
		name, err := needName(inv, "clean")
		if err != nil {
			return err
		}
		a.Name = name
	} else if len(inv.pos) > 0 {
		return usagef("clean takes a terminal name or --instance, not both")
	}
	return c.call(inv, "clean", a, nil)
}

func gc(_ context.Context, c *Context, inv *invocation) error {
	var removed []string
	if err := c.call(inv, "gc", nil, &removed); err != nil {
		return err
	}
	for _, r := range removed {
		fmt.Fprintln(c.Stdout, "removed", r)
	}
	return nil
}
