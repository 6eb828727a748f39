package main

import (
	"context"
	"encoding/json"
	"io"

	"github.com/allox-os/allox/services/internal/store"
)

// result is what the recover step reports on stdout.
type result struct {
	AgentID    string `json:"agent_id"`
	SessionID  string `json:"session_id"`
	Checkpoint string `json:"checkpoint_id"`
	Head       string `json:"head"`
	Current    string `json:"current"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	// Old copies, this rollback's and any the daemon's reaper has not deleted yet, are left
	// journaled: the daemon deletes them in the background once it has the store back.
	st, err := store.OpenWith(o.root, o.state, store.DeleteLater)
	if err != nil {
		return err
	}
	defer st.Close()
	sess, err := st.Rollback(ctx, o.agent, o.session, o.checkpoint)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(result{AgentID: o.agent, SessionID: o.session, Checkpoint: o.checkpoint,
		Head: sess.Head, Current: sess.Current})
}
