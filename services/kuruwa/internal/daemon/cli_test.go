package daemon_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/services/kuruwa/internal/cli"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// The verbs that talk to a daemon, each with the arguments that name a terminal.
var terminalVerbs = [][]string{
	{"status", "T"}, {"send", "T", "x"}, {"send", "T", "--key", "Enter"}, {"screen", "T"}, {"tail", "T"},
	{"transcript", "T"}, {"resume", "T"}, {"cancel", "T"}, {"clean", "T"}, {"attach", "T"}, {"resize", "T", "80x24"},
}

func TestEveryVerbFailsWithoutAnEntry(t *testing.T) {
	verbs := append([][]string{{"ls"}, {"gc"}, {"start", "T", "--instance", "host"}, {"run", "T", "--instance", "host"},
		{"instance", "start", "box"}, {"instance", "ls"}, {"tenant", "ls"}, {"grant", "x", "--terminal", "T"}}, terminalVerbs...)
	for _, v := range verbs {
		var out bytes.Buffer
		c := &cli.Context{Args: v, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
		err := c.Execute(context.Background())
		if err == nil || !strings.Contains(err.Error(), "no entry") {
			t.Errorf("%v: got %v, want the no-entry error", v, err)
		}
	}
}

// Attack: the entry named is a symlink to a live daemon's management socket. Every verb, the
// one-shot ones on their blocking socket and the streaming ones alike, refuses it before it
// connects: nothing reaches the daemon (no terminal is started through it).
func TestEveryVerbRefusesASymlinkedEntry(t *testing.T) {
	f := newDaemon(t, boxConfig)
	link := filepath.Join(f.dir, "mgmt-link")
	if err := os.Symlink(f.mgmt(), link); err != nil {
		t.Fatal(err)
	}
	for _, v := range append([][]string{{"ls"}, {"start", "S", "--instance", "host", "--", "true"}}, terminalVerbs...) {
		if _, err := f.kw(link, v...); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Errorf("%v through a symlinked entry: got %v, want a refusal naming it not a socket", v, err)
		}
	}
	if out, err := f.kw(f.mgmt(), "ls"); err != nil || strings.Contains(out, "S") {
		t.Errorf("ls on the real entry: %q %v; want no terminal S started through the symlink", out, err)
	}
}

// A named entry that does not answer is an error: never a fallback, never an auto-start.
func TestEveryVerbFailsOnADeadEntry(t *testing.T) {
	f := newDaemon(t, boxConfig)
	dead := f.dir + "/nothing/sock"
	for _, v := range append([][]string{{"ls"}}, terminalVerbs...) {
		var out bytes.Buffer
		c := &cli.Context{Args: v, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out,
			Getenv: func(k string) string {
				if k == cli.EnvEntry {
					return dead
				}
				return ""
			}}
		if err := c.Execute(context.Background()); err == nil || !strings.Contains(err.Error(), "never starts one") {
			t.Errorf("%v: got %v", v, err)
		}
	}
}

func TestEveryVerbReportsAnUnknownTerminal(t *testing.T) {
	f := newDaemon(t, boxConfig)
	for _, v := range terminalVerbs {
		v = append([]string{v[0], "nosuch"}, v[2:]...)
		_, err := f.kw(f.mgmt(), v...)
		if !errorIs(err, wire.CodeNotFound) || !strings.Contains(err.Error(), "nosuch") {
			t.Errorf("%v: got %v, want not_found naming the terminal", v, err)
		}
	}
}

func TestEveryForbiddenVerbSaysWhatIsMissing(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "T", "--instance", "host", "--", "sleep", "30")
	f.must(f.mgmt(), "grant", "other", "--terminal", "T")
	for _, v := range [][]string{{"cancel", "T"}, {"clean", "T"}, {"attach", "T"}, {"clean", "--instance", "host"},
		{"tenant", "add", "x"}, {"grant", "agent", "--terminal", "T"}, {"revoke", "other", "--terminal", "T"}, {"instance", "start", "box"}} {
		_, err := f.kw(f.entry("other"), v...)
		if !errorIs(err, wire.CodeForbidden) {
			t.Errorf("%v: got %v, want forbidden", v, err)
		}
	}
}

func TestCLIUsageErrors(t *testing.T) {
	f := newDaemon(t, boxConfig)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"start", "x", "--", "true"}, "--instance"},
		{[]string{"start", "x", "--instance", "host", "true"}, "after --"},
		{[]string{"start", "Bad/Name", "--instance", "host"}, "may only hold"},
		{[]string{"start", "x", "--instance", "host", "--cols", "0"}, "--cols"},
		{[]string{"send", "x"}, "text or --key"},
		{[]string{"send", "x", "hi", "--settle", "forever"}, "--settle"},
		{[]string{"tail", "x", "--from", "-3"}, "--from"},
		{[]string{"resize", "x", "big"}, "COLSxROWS"},
		{[]string{"frobnicate"}, "unknown verb"},
		{[]string{"ls", "--colour"}, "unknown flag"},
		{[]string{"grant", "other"}, "exactly one"},
	} {
		_, err := f.kw(f.mgmt(), tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
	f.must(f.mgmt(), "start", "k", "--instance", "host", "--", "sleep", "30")
	_, err := f.kw(f.mgmt(), "send", "k", "--key", "Entr")
	if err == nil || !strings.Contains(err.Error(), "enter") {
		t.Errorf("unknown key: %v", err)
	}
	_, err = f.kw(f.mgmt(), "cancel", "k", "--signal", "BOOM")
	if err == nil || !strings.Contains(err.Error(), "TERM") {
		t.Errorf("unknown signal: %v", err)
	}
}

func errorIs(err error, code string) bool {
	we := &wire.Error{Code: code}
	return err != nil && we.Is(unwrapWire(err))
}

func unwrapWire(err error) error {
	for err != nil {
		if we, ok := err.(*wire.Error); ok {
			return we
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
	return nil
}
