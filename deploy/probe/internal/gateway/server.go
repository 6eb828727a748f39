package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/pki"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// Handler serves the Gateway's API. It must sit behind a TLS listener that requires and verifies
// client certificates (pki.ServerConfig): the certificate's OU is the caller's role and its CN
// the caller's name, and a Probe may speak only for the host its certificate names.
func (g *Gateway) Handler() http.Handler {
	m := http.NewServeMux()
	probe := func(path string, h func(w http.ResponseWriter, r *http.Request, host, trace string) error) {
		m.HandleFunc("POST "+path, g.wrap(wire.RoleProbe, h))
	}
	admin := func(pattern string, h func(w http.ResponseWriter, r *http.Request, name, trace string) error) {
		m.HandleFunc(pattern, g.wrap(wire.RoleAdmin, h))
	}
	probe(wire.PathRegister, g.handleRegister)
	probe(wire.PathHeartbeat, g.handleHeartbeat)
	probe(wire.PathIntents, g.handleIntents)
	probe(wire.PathEvents, g.handleEvents)
	probe(wire.PathDialogSync, func(w http.ResponseWriter, r *http.Request, host, _ string) error {
		var s wire.DialogSync
		if err := decode(r, &s); err != nil {
			return err
		}
		if err := sameHost(host, s.Host); err != nil {
			return err
		}
		a, err := g.DialogSync(r.Context(), s)
		return reply(w, a, err)
	})
	probe(wire.PathProbeTask, func(w http.ResponseWriter, r *http.Request, host, _ string) error {
		var req wire.TaskContentRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		if err := sameHost(host, req.Host); err != nil {
			return err
		}
		c, err := g.TaskPrompt(r.Context(), host, req)
		return reply(w, c, err)
	})
	admin("POST "+wire.PathTasks, func(w http.ResponseWriter, r *http.Request, name, trace string) error {
		var req wire.TaskRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		id, err := g.Task(r.Context(), "admin:"+name, req, trace)
		return reply(w, map[string]string{"id": id}, err)
	})
	admin("GET "+wire.PathDialog, func(w http.ResponseWriter, r *http.Request, _, _ string) error {
		l, err := g.DialogList(r.Context(), r.URL.Query().Get("all") == "1")
		return reply(w, l, err)
	})
	admin("POST "+wire.PathDialogAnswer, func(w http.ResponseWriter, r *http.Request, name, trace string) error {
		var req wire.DialogAnswerRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		rec, err := g.DialogAnswer(r.Context(), "admin:"+name, req, trace)
		return reply(w, rec, err)
	})
	admin("POST "+wire.PathApply, g.handleApply)
	admin("GET "+wire.PathDevBoxes, func(w http.ResponseWriter, r *http.Request, _, _ string) error {
		l, err := g.List(r.Context())
		return reply(w, l, err)
	})
	admin("GET "+wire.PathDevBoxes+"/{name}", func(w http.ResponseWriter, r *http.Request, _, _ string) error {
		st, err := g.Get(r.Context(), r.PathValue("name"))
		return reply(w, st, err)
	})
	admin("POST "+wire.PathOps, g.handleOp)
	admin("GET "+wire.PathOps+"/{id}", func(w http.ResponseWriter, r *http.Request, _, _ string) error {
		res, err := g.Result(r.Context(), r.PathValue("id"))
		return reply(w, res, err)
	})
	admin("POST "+wire.PathSSHCert, func(w http.ResponseWriter, r *http.Request, name, trace string) error {
		var req wire.SSHCertRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		c, err := g.SSHCert(r.Context(), "admin:"+name, req, trace)
		return reply(w, c, err)
	})
	admin("GET "+wire.PathLeases, func(w http.ResponseWriter, r *http.Request, _, _ string) error {
		l, err := g.Leases(r.Context())
		return reply(w, l, err)
	})
	admin("GET "+wire.PathAudit, func(w http.ResponseWriter, r *http.Request, _, _ string) error {
		limit, err := strconv.ParseInt(cmpOr(r.URL.Query().Get("limit"), "50"), 10, 64)
		if err != nil || limit < 1 || limit > 1000 {
			return fmt.Errorf("%w: limit %q: use 1 to 1000", ErrInvalid, r.URL.Query().Get("limit"))
		}
		recs, err := g.Audit(r.Context(), r.URL.Query().Get("after"), limit)
		return reply(w, recs, err)
	})
	return m
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// wrap authenticates the caller as role, sets the trace id and maps errors.
func (g *Gateway) wrap(role string, h func(w http.ResponseWriter, r *http.Request, name, trace string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		trace := r.Header.Get(wire.HeaderTrace)
		if len(trace) != 32 || strings.Trim(trace, "0123456789abcdef") != "" {
			trace = wire.NewTraceID()
		}
		w.Header().Set(wire.HeaderTrace, trace)
		gotRole, name, err := pki.Identity(r.TLS)
		switch {
		case err != nil:
			writeErr(w, http.StatusUnauthorized, "unauthorized", err.Error()+": present a client certificate from the Gateway's CA", "")
			return
		case gotRole != role:
			writeErr(w, http.StatusForbidden, "forbidden", fmt.Sprintf("%s %s needs a %s certificate; %q is a %s", r.Method, r.URL.Path, role, name, gotRole), "")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4<<20)
		if err := h(w, r, name, trace); err != nil {
			mapErr(w, err)
		}
	}
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %v", ErrInvalid, err)
	}
	return nil
}

// sameHost refuses a Probe speaking for a host its certificate does not name.
func sameHost(cert, claimed string) error {
	if claimed != cert {
		return fmt.Errorf("%w: host %q: this client certificate is for host %q", ErrDenied, claimed, cert)
	}
	return nil
}

func (g *Gateway) handleRegister(w http.ResponseWriter, r *http.Request, host, trace string) error {
	var reg wire.Register
	if err := decode(r, &reg); err != nil {
		return err
	}
	if err := sameHost(host, reg.Host); err != nil {
		return err
	}
	gr, err := g.Register(r.Context(), reg, trace)
	return reply(w, gr, err)
}

func (g *Gateway) handleHeartbeat(w http.ResponseWriter, r *http.Request, host, _ string) error {
	var hb wire.Heartbeat
	if err := decode(r, &hb); err != nil {
		return err
	}
	if err := sameHost(host, hb.Host); err != nil {
		return err
	}
	gr, err := g.Renew(r.Context(), hb)
	return reply(w, gr, err)
}

func (g *Gateway) handleIntents(w http.ResponseWriter, r *http.Request, host, _ string) error {
	var q struct {
		Host  string        `json:"host"`
		Epoch int64         `json:"epoch"`
		After int64         `json:"after"`
		Wait  time.Duration `json:"wait"`
	}
	if err := decode(r, &q); err != nil {
		return err
	}
	if err := sameHost(host, q.Host); err != nil {
		return err
	}
	ins, err := g.Pull(r.Context(), host, q.Epoch, q.After, min(q.Wait, 30*time.Second))
	return reply(w, ins, err)
}

func (g *Gateway) handleEvents(w http.ResponseWriter, r *http.Request, host, _ string) error {
	var b wire.Events
	if err := decode(r, &b); err != nil {
		return err
	}
	if err := sameHost(host, b.Host); err != nil {
		return err
	}
	return reply(w, struct{}{}, g.Report(r.Context(), b))
}

func (g *Gateway) handleApply(w http.ResponseWriter, r *http.Request, name, trace string) error {
	var a wire.Apply
	if err := decode(r, &a); err != nil {
		return err
	}
	changed, err := g.Apply(r.Context(), "admin:"+name, a, trace)
	return reply(w, map[string][]string{"changed": changed}, err)
}

func (g *Gateway) handleOp(w http.ResponseWriter, r *http.Request, name, trace string) error {
	var op wire.Op
	if err := decode(r, &op); err != nil {
		return err
	}
	id, err := g.Op(r.Context(), "admin:"+name, op, trace)
	return reply(w, map[string]string{"id": id}, err)
}

func reply(w http.ResponseWriter, v any, err error) error {
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(v)
}

func mapErr(w http.ResponseWriter, err error) {
	for _, m := range []struct {
		err    error
		status int
		code   string
	}{
		{ErrInvalid, http.StatusBadRequest, "invalid"},
		{ErrNotFound, http.StatusNotFound, "not_found"},
		{ErrLost, http.StatusConflict, "lease_lost"},
		{ErrConflict, http.StatusConflict, "conflict"},
		{ErrDenied, http.StatusForbidden, "forbidden"},
		{ErrLate, http.StatusGone, "late"},
		{ErrUndelivered, http.StatusGatewayTimeout, "undelivered"},
	} {
		if errors.Is(err, m.err) {
			writeErr(w, m.status, m.code, err.Error(), "")
			return
		}
	}
	writeErr(w, http.StatusServiceUnavailable, "unavailable", err.Error(), "")
}

func writeErr(w http.ResponseWriter, status int, code, msg, field string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(wire.Error{Code: code, Message: msg, Field: field})
}
