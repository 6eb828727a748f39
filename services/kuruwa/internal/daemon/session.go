package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/kuruwa/internal/config"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// checkSession validates the agent and session of an instance before anything is created: an
// allox_session definition needs both (the agent may be pinned by the definition), the session
// must exist in its workspace daemon, and other definitions take neither.
func (d *Daemon) checkSession(def config.Definition, a *wire.InstanceArgs) error {
	sd := def.Session
	if sd == nil {
		if a.Agent != "" || a.Session != "" {
			field := "agent"
			if a.Agent == "" {
				field = "session"
			}
			return wire.Errorf(wire.CodeBadRequest, field, "definition %s is not of kind %s: its instances name no agent or session; drop --agent and --session", def.Name, config.KindAlloxSession)
		}
		return nil
	}
	if a.Agent == "" {
		a.Agent = sd.Agent
	}
	switch {
	case a.Agent == "":
		return wire.Errorf(wire.CodeBadRequest, "agent", "definition %s runs terminals in an Allox session: name its agent, e.g. --agent AGENT --session SESSION", def.Name)
	case sd.Agent != "" && a.Agent != sd.Agent:
		return wire.Errorf(wire.CodeForbidden, "agent", "definition %s serves only agent %s's sessions, not agent %s's", def.Name, sd.Agent, a.Agent)
	case a.Session == "":
		return wire.Errorf(wire.CodeBadRequest, "session", "definition %s runs terminals in an Allox session: name it, e.g. --agent %s --session SESSION", def.Name, a.Agent)
	}
	c, err := SessionClient(sd)
	if err != nil {
		return wire.Errorf(wire.CodeInternal, "definition", "definition %s: %v", def.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Call(ctx, rpc.ActionSessionGet, map[string]string{"agent_id": a.Agent, "session_id": a.Session}, nil)
	var re *rpc.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re) && re.Code == rpc.CodeNotFound:
		if strings.HasSuffix(re.Field, "agent_id") {
			return wire.Errorf(wire.CodeNotFound, "agent", "no agent %s in the workspace daemon at %s: create it with agent.create, then its session with session.create", a.Agent, sd.Daemon)
		}
		return wire.Errorf(wire.CodeNotFound, "session", "no session %s of agent %s in the workspace daemon at %s: create it with session.create first", a.Session, a.Agent, sd.Daemon)
	case errors.As(err, &re) && re.Code == rpc.CodeInvalidParams:
		field := "session"
		if strings.HasSuffix(re.Field, "agent_id") {
			field = "agent"
		}
		return wire.Errorf(wire.CodeBadRequest, field, "agent %q, session %q: %s", a.Agent, a.Session, re.Message)
	default:
		return wire.Errorf(wire.CodeInternal, "definition", "definition %s: the workspace daemon at %s: %v", def.Name, sd.Daemon, err)
	}
}

// SessionClient is an RPC client of an allox_session definition's workspace daemon.
func SessionClient(sd *config.SessionDef) (*rpc.Client, error) {
	token := ""
	if sd.TokenFile != "" {
		b, err := os.ReadFile(sd.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("token_file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	return rpc.NewClient(sd.Daemon, token, nil), nil
}
