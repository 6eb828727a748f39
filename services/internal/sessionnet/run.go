package sessionnet

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/tracked"
)

// run takes part in one process.start: nothing for a disabled session; the session's namespace
// for an isolated one; and the proxy's listener and environment for a proxy one.
func (p *Plugin) run(_ context.Context, r *plugin.RunStart) (plugin.RunHook, error) {
	k := key{r.AgentID, r.SessionID}
	m := p.mode(k)
	if m == Disabled {
		return nil, nil
	}
	if !slices.Contains(p.cfg.Allowed, m) {
		return nil, rpc.Errorf(rpc.CodeConflict, "session_id",
			"session %s/%s has network mode %q, which this daemon no longer allows (--session-network-modes %s): restart the daemon allowing it, or delete the session",
			k.agent, k.session, m, modeList(p.cfg.Allowed))
	}
	ns, err := p.enter(k, m)
	if err != nil {
		return nil, fmt.Errorf("session %s/%s: network mode %s: %w", k.agent, k.session, m, err)
	}
	if err := r.SetNetNS(ns); err != nil {
		ns.Close()
		return nil, err
	}
	h := &hook{ns: ns, mode: m}
	r.OnFailure(h.release)
	if m == Proxy {
		for n, v := range ProxyEnv {
			if err := r.SetEnv(n, v); err != nil {
				return nil, err
			}
		}
	}
	return h, nil
}

// enter opens the session's namespace, making it at the session's first run, and for a proxy
// session has the broker serve its proxy in it (once per session).
func (p *Plugin) enter(k key, m Mode) (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	path := filepath.Join(p.nsDir(), k.hash())
	ns, err := p.ns.Open(path)
	if err != nil {
		// Not made yet (or a leftover that holds no namespace): make it afresh; a proxy served
		// in a namespace that is gone serves nobody.
		if p.serving[k] {
			p.broker.Close(k.agent, k.session)
			delete(p.serving, k)
		}
		if err := p.ns.Remove(path); err != nil {
			return nil, err
		}
		if err := p.ns.Create(path); err != nil {
			return nil, err
		}
		if ns, err = p.ns.Open(path); err != nil {
			return nil, err
		}
	}
	if m == Proxy && !p.serving[k] {
		ln, err := p.ns.Listen(ns, "tcp", ProxyAddr)
		if err != nil {
			ns.Close()
			return nil, fmt.Errorf("the proxy's listener %s in the session's namespace: %w", ProxyAddr, err)
		}
		p.serving[k] = true
		p.wg.Add(1)
		go p.serve(k, ln)
	}
	return ns, nil
}

// serve runs the broker's proxy for one session until it is closed.
func (p *Plugin) serve(k key, ln net.Listener) {
	defer p.wg.Done()
	if err := p.broker.Serve(p.ctx, k.agent, k.session, ln); err != nil {
		p.log.Warn("session network: the session's proxy stopped", "agent_id", k.agent, "session_id", k.session, "error", err.Error())
		p.mu.Lock()
		delete(p.serving, k) // the next run opens it again
		p.mu.Unlock()
	}
}

// hook keeps the run's namespace descriptor open until the run has started, and reports the
// session's mode as the run's metadata.
type hook struct {
	ns   *os.File
	mode Mode
	once sync.Once
}

func (h *hook) release() { h.once.Do(func() { h.ns.Close() }) }

func (h *hook) meta() json.RawMessage {
	out, _ := json.Marshal(struct {
		Mode Mode `json:"mode"`
	}{h.mode})
	return out
}

func (h *hook) Begin(*tracked.Status) (json.RawMessage, error) {
	h.release() // the run is in the namespace now; the namespace is kept by its mount
	return h.meta(), nil
}

func (h *hook) End(*tracked.Status, error) (json.RawMessage, error) {
	h.release()
	return nil, nil
}
