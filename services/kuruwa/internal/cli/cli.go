// Package cli is the kuruwa command: the verbs agents and people use (start, run, resume,
// status, ls, send, screen, tail, transcript, cancel, clean, gc, attach, skill), the host's
// management verbs (instance, tenant, grant, revoke), and daemon, which hands over to kuruwad.
// It links neither the daemons nor the emulator, so that each call starts fast. Every verb that talks to a daemon connects to exactly the entry it
// was given — by --entry or KURUWA_ENTRY — and fails if that entry does not answer: it never
// falls back to another entry and never starts a daemon.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/allox-os/allox/services/kuruwa/internal/dial"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// EnvEntry names the entry socket when --entry is not given.
const EnvEntry = "KURUWA_ENTRY"

// Context is one invocation: arguments, environment and streams, so tests drive the CLI
// in-process.
type Context struct {
	Args   []string
	Getenv func(string) string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// ExitError carries the exit status a verb asks for (run and resume exit with the terminal's).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// UsageError is a mistake on the command line.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg + " (kuruwa help lists the verbs)" }

func usagef(format string, args ...any) error { return &UsageError{Msg: fmt.Sprintf(format, args...)} }

type verb struct {
	flags map[string]bool // flag name → takes a value
	run   func(ctx context.Context, c *Context, inv *invocation) error
	help  string
	// stream: the verb runs until its context ends or its stream does (see NeedsSignals).
	stream bool
}

// Execute runs the verb in c.Args.
func (c *Context) Execute(ctx context.Context) error {
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	entryFlag, args, err := splitEntry(c.Args)
	if err != nil {
		return err
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		c.help()
		return nil
	}
	name, args := verbName(args)
	v, ok := verbs()[name]
	if !ok {
		return usagef("unknown verb %q", name)
	}
	inv, err := parse(v.flags, args[1:])
	if err != nil {
		return err
	}
	inv.entry = entryFlag
	if inv.entry == "" {
		inv.entry = inv.one("entry")
	}
	return v.run(ctx, c, inv)
}

// splitEntry takes the leading --entry flags off args.
func splitEntry(args []string) (string, []string, error) {
	entryFlag := ""
	for len(args) > 0 && strings.HasPrefix(args[0], "--entry") {
		if v, ok := strings.CutPrefix(args[0], "--entry="); ok {
			entryFlag, args = v, args[1:]
		} else if len(args) > 1 {
			entryFlag, args = args[1], args[2:]
		} else {
			return "", nil, usagef("--entry needs a path")
		}
	}
	return entryFlag, args, nil
}

// verbName is the verb args start with ("instance ls" is one) and the arguments from its last word.
func verbName(args []string) (string, []string) {
	name := args[0]
	if (name == "instance" || name == "tenant") && len(args) > 1 {
		name, args = name+" "+args[1], args[1:]
	}
	return name, args
}

// NeedsSignals reports whether the verb in args lasts until interrupted (a stream, a wait, an
// attach), so that its caller turns SIGINT and SIGTERM into the end of its context. Every other
// verb makes one request and exits, and starts faster without a signal-handling thread.
func NeedsSignals(args []string) bool {
	_, args, err := splitEntry(args)
	if err != nil || len(args) == 0 {
		return false
	}
	name, _ := verbName(args)
	return verbs()[name].stream
}

func (c *Context) help() {
	fmt.Fprintln(c.Stdout, "usage: kuruwa [--entry SOCKET] VERB [ARGS]   (or set KURUWA_ENTRY)")
	vs := verbs()
	for _, n := range sortedVerbs(vs) {
		fmt.Fprintf(c.Stdout, "  %-18s %s\n", n, vs[n].help)
	}
}

// invocation is a parsed command line: positional arguments and flag values, in order.
type invocation struct {
	pos   []string
	vals  map[string][]string
	rest  []string // after "--"
	entry string
}

func (i *invocation) one(name string) string {
	if v := i.vals[name]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

func (i *invocation) has(name string) bool { _, ok := i.vals[name]; return ok }

// parse accepts flags anywhere before "--" ("--key Enter", "--key=Enter"), so a verb reads as
// "send build 'make test' --key Enter".
func parse(flags map[string]bool, args []string) (*invocation, error) {
	inv := &invocation{vals: map[string][]string{}}
	all := map[string]bool{"entry": true}
	for k, v := range flags {
		all[k] = v
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			inv.rest = args[i+1:]
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" || len(a) > 1 && a[1] >= '0' && a[1] <= '9' {
			inv.pos = append(inv.pos, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		val, hasVal := "", false
		if n, v, ok := strings.Cut(name, "="); ok {
			name, val, hasVal = n, v, true
		}
		takes, known := all[name]
		if !known {
			return nil, usagef("unknown flag %s", a)
		}
		if takes && !hasVal {
			if i+1 >= len(args) {
				return nil, usagef("flag --%s needs a value", name)
			}
			i++
			val = args[i]
		}
		inv.vals[name] = append(inv.vals[name], val)
	}
	return inv, nil
}

// entryPath is the entry the invocation names, or an error: there is no fallback.
func (c *Context) entryPath(inv *invocation) (string, error) {
	path := inv.entry
	if path == "" {
		path = c.Getenv(EnvEntry)
	}
	if path == "" {
		return "", errors.New("no entry: pass --entry SOCKET or set KURUWA_ENTRY (the host's management entry is DIR/manage/sock of the daemon's directory)")
	}
	return path, nil
}

func dialFailed(err error) error {
	return fmt.Errorf("%w; is the daemon for this project running? (kuruwa never starts one for you)", err)
}

// dial connects to the entry the invocation names for a stream.
func (c *Context) dial(inv *invocation) (*wire.Conn, error) {
	path, err := c.entryPath(inv)
	if err != nil {
		return nil, err
	}
	f, err := dial.Stream(path)
	if err != nil {
		return nil, dialFailed(err)
	}
	return wire.NewConn(f), nil
}

// call is one request/response on a fresh blocking connection.
func (c *Context) call(inv *invocation, op string, args, out any) error {
	path, err := c.entryPath(inv)
	if err != nil {
		return err
	}
	s, err := dial.Blocking(path)
	if err != nil {
		return dialFailed(err)
	}
	defer s.Close()
	return wire.CallOnce(s, op, args, out)
}

func needName(inv *invocation, verb string) (string, error) {
	if len(inv.pos) < 1 {
		return "", usagef("%s needs a terminal name: kuruwa %s NAME", verb, verb)
	}
	return inv.pos[0], nil
}
