package sessionnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/atomicfile"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
)

// Mode is a session's network mode.
type Mode string

// The modes.
const (
	Disabled Mode = "disabled"
	Isolated Mode = "isolated"
	Proxy    Mode = "proxy"
)

// Modes are every mode, in the order messages list them.
var Modes = []Mode{Disabled, Isolated, Proxy}

// ParseMode parses one mode.
func ParseMode(s string) (Mode, error) {
	if m := Mode(s); slices.Contains(Modes, m) {
		return m, nil
	}
	return "", fmt.Errorf("%q is not a network mode: use one of %s", s, modeList(Modes))
}

// ParseModes parses a comma-separated list of modes (--session-network-modes), each once.
func ParseModes(s string) ([]Mode, error) {
	var out []Mode
	for _, f := range strings.Split(s, ",") {
		m, err := ParseMode(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, m) {
			return nil, fmt.Errorf("%q is listed twice: name each mode once", m)
		}
		out = append(out, m)
	}
	return out, nil
}

func modeList(ms []Mode) string {
	q := make([]string, len(ms))
	for i, m := range ms {
		q[i] = fmt.Sprintf("%q", m)
	}
	return strings.Join(q, ", ")
}

func (c Config) check() error {
	if _, err := ParseMode(string(c.Default)); err != nil {
		return fmt.Errorf("--session-network: %w", err)
	}
	if c.Default == Disabled {
		return errors.New("--session-network disabled: the plugin is opened only for isolated or proxy")
	}
	if c.Allowed != nil && !slices.Contains(c.Allowed, c.Default) {
		return fmt.Errorf("--session-network-modes %s does not hold the default mode %q (--session-network): add it", modeList(c.Allowed), c.Default)
	}
	return nil
}

// record is a session's chosen mode, kept in the plugin's state so that a restart keeps it.
type record struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
	Mode      Mode   `json:"mode"`
}

func (p *Plugin) recordPath(k key) string { return filepath.Join(p.modeDir(), k.hash()+".json") }

func (p *Plugin) loadModes() error {
	entries, err := os.ReadDir(p.modeDir())
	if err != nil {
		return fmt.Errorf("session network: %w", err)
	}
	for _, e := range entries {
		path := filepath.Join(p.modeDir(), e.Name())
		if !strings.HasSuffix(e.Name(), ".json") {
			continue // a write that did not finish (".tmp")
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("session network: %w", err)
		}
		var r record
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("session network: %s: %w: remove it (the session then gets the default mode)", path, err)
		}
		if _, err := ParseMode(string(r.Mode)); err != nil {
			return fmt.Errorf("session network: %s: mode %w", path, err)
		}
		p.modes[key{r.AgentID, r.SessionID}] = r.Mode
	}
	return nil
}

// mode is the session's mode: its choice, or the default.
func (p *Plugin) mode(k key) Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.modes[k]; ok {
		return m
	}
	return p.cfg.Default
}

// create records the mode session.create chose, if any, within the allowed set.
func (p *Plugin) create(_ context.Context, s plugin.SessionStart) error {
	raw, ok := s.Params["network"]
	if !ok {
		return nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return rpc.Errorf(rpc.CodeInvalidParams, "params.network", "params.network must be a string, one of %s", modeList(p.cfg.Allowed))
	}
	m, err := ParseMode(v)
	if err == nil && !slices.Contains(p.cfg.Allowed, m) {
		err = fmt.Errorf("this daemon allows only %s (--session-network-modes)", modeList(p.cfg.Allowed))
	}
	if err != nil {
		return &rpc.Error{Code: rpc.CodeInvalidParams, Field: "params.network", Message: "params.network " + err.Error(),
			Choices: modeStrings(p.cfg.Allowed)}
	}
	k := key{s.AgentID, s.SessionID}
	data, err := json.Marshal(record{AgentID: k.agent, SessionID: k.session, Mode: m})
	if err != nil {
		return err
	}
	path := p.recordPath(k)
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("session network: keep the session's mode: %w", err)
	}
	p.mu.Lock()
	p.modes[k] = m
	p.mu.Unlock()
	return nil
}

func modeStrings(ms []Mode) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m)
	}
	return out
}

// info is what session.get reports under plugins.session-network.
func (p *Plugin) info(agent, session string) json.RawMessage {
	out, _ := json.Marshal(struct {
		Mode Mode `json:"mode"`
	}{p.mode(key{agent, session})})
	return out
}

// deleted drops what the plugin kept for the session: its proxy, its namespace, its mode.
func (p *Plugin) deleted(agent, session string) error {
	k := key{agent, session}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.serving[k] {
		p.broker.Close(agent, session)
		delete(p.serving, k)
	}
	var errs []error
	if err := p.ns.Remove(filepath.Join(p.nsDir(), k.hash())); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(p.recordPath(k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("session network: %w", err))
	}
	delete(p.modes, k)
	return errors.Join(errs...)
}
