package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/pki"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

func ca(args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "init" && args[0] != "issue" && args[0] != "ssh-init") {
		return errors.New("usage: gateway ca init --dir DIR | gateway ca issue --dir DIR --name N --role probe|admin|gateway [--host H,...] | gateway ca ssh-init --dir DIR")
	}
	fs := flag.NewFlagSet("gateway ca "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", "", "PKI directory")
	name := fs.String("name", "", "file name and common name (a Probe's: its host name)")
	role := fs.String("role", "", "probe, admin or gateway")
	hosts := fs.String("host", "", "comma-separated IPs or DNS names the certificate serves (gateway)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("ca: --dir is required")
	}
	if args[0] == "ssh-init" {
		pub, err := initSSHCA(*dir)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, pub)
		return nil
	}
	if args[0] == "init" {
		c, err := pki.NewCA("allox-gateway-ca")
		if err != nil {
			return err
		}
		if err := c.Save(*dir); err != nil {
			return err
		}
		fmt.Fprintln(stdout, filepath.Join(*dir, pki.CAFile))
		return nil
	}
	switch *role {
	case wire.RoleProbe, wire.RoleAdmin:
	case "gateway":
		if *hosts == "" {
			return errors.New("ca issue: --role gateway needs --host (the addresses the Gateway listens on, e.g. 127.0.0.1)")
		}
	default:
		return fmt.Errorf("ca issue: --role %q: use probe, admin or gateway", *role)
	}
	if *name == "" {
		return errors.New("ca issue: --name is required (a Probe's certificate is named after its host)")
	}
	c, err := pki.LoadCA(*dir)
	if err != nil {
		return err
	}
	var hs []string
	if *hosts != "" {
		hs = strings.Split(*hosts, ",")
	}
	if err := c.IssueFiles(*dir, *name, *name, *role, hs...); err != nil {
		return err
	}
	fmt.Fprintln(stdout, filepath.Join(*dir, *name+".pem"))
	return nil
}

func operate(ctx context.Context, cmd string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gateway "+cmd, flag.ContinueOnError)
	gw := fs.String("gateway", "https://127.0.0.1:7443", "comma-separated Gateway replica URLs")
	pkiDir := fs.String("pki", "", "directory with ca.pem and the operator's certificate")
	certName := fs.String("cert", "admin", "name of the operator certificate in --pki (<name>.pem, <name>-key.pem)")
	reason := fs.String("reason", "", "why (recorded in the audit)")
	after := fs.String("after", "", "audit: the key to page after")
	limit := fs.Int("limit", 50, "audit: records per page")
	session := fs.String("session", "", "op, dialog answer, task: the session")
	checkpoint := fs.String("checkpoint", "", "op rollback: the checkpoint to restore")
	approval := fs.String("approval", "", "op: the approval reference (required for rollback)")
	wait := fs.Duration("wait", 0, "op: wait this long for the Probe's result; task: for the agent's task to end (done or failed)")
	keyFile := fs.String("key", "", "ssh-cert: the user's public key file (authorized_keys form, e.g. ~/.ssh/id_ed25519.pub)")
	who := fs.String("who", "", "ssh-cert: the person the credential is for (its key id, in the Probe's activity)")
	ttl := fs.Duration("ttl", 15*time.Minute, "ssh-cert: validity")
	pty := fs.Bool("pty", true, "ssh-cert: permit a terminal")
	forward := fs.Bool("forward", true, "ssh-cert: permit direct-tcpip and direct-streamlocal forwards (an IDE needs them)")
	agentFwd := fs.Bool("agent-forwarding", false, "ssh-cert: permit ssh -A (the session's runs of the connection use the client's SSH agent)")
	outFile := fs.String("o", "", "ssh-cert: write the certificate to this file (ssh's -cert.pub beside the key) instead of stdout")
	all := fs.Bool("all", false, "dialog ls: the ended requests too (metadata)")
	devbox := fs.String("devbox", "", "dialog answer, task: the DevBox")
	cli := fs.String("cli", "", "task: the agent's CLI: codex, claude_code or opencode")
	modelURL := fs.String("model-url", "", "task: the model endpoint as the sandbox reaches it (the CLI's base URL)")
	model := fs.String("model", "", "task: the model name")
	keyRef := fs.String("api-key-ref", "", "task: the name of the API key file in the Probe's --agent-keys directory (never the key)")
	approvalMode := fs.String("approval-mode", wire.ApprovalDialog, "task: dialog (permission requests through the dialog channel: claude_code and opencode by their hooks, codex by its screen) or none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pkiDir == "" {
		return fmt.Errorf("%s: --pki DIR is required (an admin certificate: gateway ca issue --role admin --name admin)", cmd)
	}
	tc, err := pki.ClientConfig(filepath.Join(*pkiDir, pki.CAFile), filepath.Join(*pkiDir, *certName+".pem"), filepath.Join(*pkiDir, *certName+"-key.pem"))
	if err != nil {
		return err
	}
	a, err := wire.NewAdminClient(strings.Split(*gw, ","), tc)
	if err != nil {
		return err
	}
	rest := fs.Args()
	var out any
	switch cmd {
	case "apply":
		if len(rest) != 1 {
			return errors.New("usage: gateway apply FILE.hcl")
		}
		boxes, diags := spec.Load(rest[0])
		if diags.HasErrors() {
			return errors.New(strings.TrimSpace(spec.Format(diags)))
		}
		var res map[string][]string
		err, out = a.Do(ctx, http.MethodPost, wire.PathApply, wire.Apply{DevBoxes: boxes, Reason: *reason}, &res), &res
	case "get":
		if len(rest) != 1 {
			return errors.New("usage: gateway get DEVBOX")
		}
		var st wire.DevBoxStatus
		err, out = a.Do(ctx, http.MethodGet, wire.PathDevBoxes+"/"+url.PathEscape(rest[0]), nil, &st), &st
	case "list":
		var l []wire.DevBoxStatus
		err, out = a.Do(ctx, http.MethodGet, wire.PathDevBoxes, nil, &l), &l
	case "leases":
		var l []wire.LeaseStatus
		err, out = a.Do(ctx, http.MethodGet, wire.PathLeases, nil, &l), &l
	case "audit":
		var l []json.RawMessage
		q := url.Values{"after": {*after}, "limit": {fmt.Sprint(*limit)}}
		err, out = a.Do(ctx, http.MethodGet, wire.PathAudit+"?"+q.Encode(), nil, &l), &l
	case "ssh-cert":
		if len(rest) != 2 || *keyFile == "" {
			return errors.New("usage: gateway ssh-cert --key FILE.pub --who NAME --approval REF [--ttl 15m] [--pty=false] [--forward=false] [--agent-forwarding] [-o FILE-cert.pub] DEVBOX SESSION")
		}
		pub, err := os.ReadFile(*keyFile)
		if err != nil {
			return fmt.Errorf("ssh-cert: --key: %w", err)
		}
		var c wire.SSHCert
		req := wire.SSHCertRequest{DevBox: rest[0], Session: rest[1], PublicKey: string(pub), Who: *who, Approval: *approval, Reason: *reason,
			TTLSeconds: int(ttl.Seconds()), PTY: *pty, PortForwarding: *forward, AgentForwarding: *agentFwd}
		if err := a.Do(ctx, http.MethodPost, wire.PathSSHCert, req, &c); err != nil {
			return err
		}
		if *outFile != "" {
			if err := os.WriteFile(*outFile, []byte(c.Certificate+"\n"), 0o644); err != nil {
				return err
			}
		}
		out = &c
	case "dialog-ls":
		var l []wire.DialogItem
		path := wire.PathDialog
		if *all {
			path += "?all=1"
		}
		err, out = a.Do(ctx, http.MethodGet, path, nil, &l), &l
	case "dialog-answer":
		if len(rest) != 2 || *devbox == "" || *session == "" {
			return errors.New("usage: gateway dialog answer --devbox DEVBOX --session SESSION REQUEST_ID CHOICE (gateway dialog ls lists the requests)")
		}
		var rec wire.DialogRecord
		req := wire.DialogAnswerRequest{DevBox: *devbox, Session: *session, RequestID: rest[0], Choice: rest[1]}
		err, out = a.Do(ctx, http.MethodPost, wire.PathDialogAnswer, req, &rec), &rec
	case "task":
		if len(rest) != 1 || *devbox == "" || *session == "" || *cli == "" {
			return errors.New("usage: gateway task --devbox D --session S --cli codex|claude_code|opencode [--model-url URL] [--model M] [--api-key-ref NAME] [--approval-mode dialog|none] [--wait D] PROMPT|- (- reads the prompt from stdin: a command line is visible to every user of the host)")
		}
		prompt := rest[0]
		if prompt == "-" {
			b, err := io.ReadAll(io.LimitReader(stdin, wire.MaxPrompt+1))
			if err != nil {
				return fmt.Errorf("task: read the prompt from stdin: %w", err)
			}
			prompt = strings.TrimSuffix(string(b), "\n")
		}
		req := wire.TaskRequest{DevBox: *devbox, Session: *session, CLI: *cli, Prompt: prompt, ModelURL: *modelURL, Model: *model,
			APIKeyRef: *keyRef, Approval: *approvalMode, Reason: *reason}
		out, err = runTask(ctx, a, req, *wait)
	case "op":
		if len(rest) != 2 {
			return errors.New("usage: gateway op checkpoint|rollback|vm_snapshot DEVBOX [--session S] [--checkpoint C] [--approval REF]")
		}
		op := wire.Op{Kind: rest[0], DevBox: rest[1], Session: *session, Checkpoint: *checkpoint, Approval: *approval, Reason: *reason}
		out, err = runOp(ctx, a, op, *wait)
	}
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// stdin is where `gateway task -` reads the prompt.
var stdin io.Reader = os.Stdin

// runTask sends a task and, with wait, follows the session's agent until the task ends.
func runTask(ctx context.Context, a *wire.AdminClient, req wire.TaskRequest, wait time.Duration) (any, error) {
	var id map[string]string
	if err := a.Do(ctx, http.MethodPost, wire.PathTasks, req, &id); err != nil {
		return nil, err
	}
	out := struct {
		ID    string              `json:"id"`
		Agent *wire.AgentObserved `json:"agent,omitempty"`
	}{ID: id["id"]}
	deadline := time.Now().Add(wait)
	for wait > 0 {
		var st wire.DevBoxStatus
		if err := a.Do(ctx, http.MethodGet, wire.PathDevBoxes+"/"+url.PathEscape(req.DevBox), nil, &st); err != nil {
			return nil, err
		}
		if st.Observed != nil {
			if ag, ok := st.Observed.Agents[req.Session]; ok && ag.Intent == out.ID {
				out.Agent = &ag
				if ag.Status == wire.AgentFailed {
					return &out, fmt.Errorf("task %s failed: %s", out.ID, ag.Reason)
				}
				if ag.Status == wire.AgentDone {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return &out, nil
}

// runOp sends op and, with wait, polls for its result.
func runOp(ctx context.Context, a *wire.AdminClient, op wire.Op, wait time.Duration) (any, error) {
	var id map[string]string
	if err := a.Do(ctx, http.MethodPost, wire.PathOps, op, &id); err != nil {
		return nil, err
	}
	var res wire.OpResult
	deadline := time.Now().Add(wait)
	for {
		if err := a.Do(ctx, http.MethodGet, wire.PathOps+"/"+id["id"], nil, &res); err != nil {
			return nil, err
		}
		res.ID = id["id"]
		if res.Done || res.Failed != "" || time.Now().After(deadline) {
			if res.Failed != "" {
				return &res, fmt.Errorf("op %s failed on the probe: %s", res.ID, res.Failed)
			}
			return &res, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
