package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The session-share plugin's actions. enable, disable, status, ls and stat are ordinary calls;
// read and write are streams: after the switch, read's daemon sends the file's bytes and closes;
// write's client sends the bytes and half-closes, and the daemon answers one JSON line
// {"ok":true,"bytes":N} or {"ok":false,"error":"..."} and closes.
const (
	actionShareEnable  = "share.enable"
	actionShareDisable = "share.disable"
	actionShareStatus  = "share.status"
	actionShareLs      = "share.ls"
	actionShareStat    = "share.stat"
	actionShareRead    = "share.read"
	actionShareWrite   = "share.write"
)

// maxWriteReply bounds the daemon's one-line answer to a write.
const maxWriteReply = 64 << 10

var shareTyped = map[string]func(context.Context, *caller, []string, io.Reader) error{
	"enable":  shareEnable,
	"disable": shareNoArgs("disable", actionShareDisable),
	"status":  shareNoArgs("status", actionShareStatus),
	"ls":      shareLs,
	"stat":    shareStat,
	"read":    shareRead,
	"write":   shareWrite,
}

// shareEnable is "allox share enable [--scope DIR] [--permission read|write]".
func shareEnable(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	const use = "use: allox share enable [--scope DIR] [--permission read|write] (DIR is a directory of current/, e.g. output; the default is all of current/, read-only)"
	params := map[string]any{}
	for len(args) > 0 {
		name, value, err := flagValue(args, use)
		if err != nil {
			return err
		}
		switch name {
		case "--scope":
			if value == "" {
				return usagef("allox share enable: --scope needs a directory of current/, e.g. --scope output")
			}
			params["scope"] = value
		case "--permission":
			if value != "read" && value != "write" {
				return usagef("allox share enable: --permission %q: use read or write", value)
			}
			params["permission"] = value
		default:
			return usagef("allox share enable: unknown flag %q: %s", name, use)
		}
		if strings.Contains(args[0], "=") {
			args = args[1:]
		} else {
			args = args[2:]
		}
	}
	return c.call(ctx, actionShareEnable, params)
}

// flagValue reads "--name value" or "--name=value" at args[0].
func flagValue(args []string, use string) (name, value string, err error) {
	if !strings.HasPrefix(args[0], "--") {
		return "", "", usagef("unexpected argument %q: %s", args[0], use)
	}
	if n, v, ok := strings.Cut(args[0], "="); ok {
		return n, v, nil
	}
	if len(args) < 2 {
		return "", "", usagef("%s needs a value: %s", args[0], use)
	}
	return args[0], args[1], nil
}

func shareNoArgs(sub, action string) func(context.Context, *caller, []string, io.Reader) error {
	return func(ctx context.Context, c *caller, args []string, _ io.Reader) error {
		if len(args) != 0 {
			return usagef("use: allox share %s (no arguments)", sub)
		}
		return c.call(ctx, action, map[string]any{})
	}
}

// shareLs is "allox share ls TARGET [PATH]".
func shareLs(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	if len(args) < 1 || len(args) > 2 {
		return usagef("use: allox share ls TARGET [PATH], e.g. allox share ls agent-b/session-1 output")
	}
	path := "."
	if len(args) == 2 {
		path = args[1]
	}
	return shareCall(ctx, c, "ls", actionShareLs, args[0], path)
}

// shareStat is "allox share stat TARGET PATH".
func shareStat(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	if len(args) != 2 {
		return usagef("use: allox share stat TARGET PATH, e.g. allox share stat agent-b/session-1 report.txt")
	}
	return shareCall(ctx, c, "stat", actionShareStat, args[0], args[1])
}

func shareCall(ctx context.Context, c *caller, sub, action, target, path string) error {
	if err := checkTarget(sub, target); err != nil {
		return err
	}
	if err := c.call(ctx, action, shareParams(target, path)); err != nil {
		return shareErr(sub, target, path, err)
	}
	return nil
}

func shareParams(target, path string) map[string]any {
	return map[string]any{"target": target, "path": path}
}

// checkTarget refuses a target that is not AGENT/SESSION before anything is sent.
func checkTarget(sub, target string) error {
	a, s, ok := strings.Cut(target, "/")
	if !ok || a == "" || s == "" || strings.Contains(s, "/") {
		return usagef("allox share %s %q: TARGET is AGENT/SESSION, e.g. agent-b/session-1", sub, target)
	}
	return nil
}

// shareErr is a failed share request as one line naming the target, the path and the reason.
// The not-enabled answer for an unknown action passes through unchanged (plugin.run explains it).
func shareErr(sub, target, path string, err error) error {
	if isUnknownAction(err) {
		return err
	}
	reason := err.Error()
	var le lineError
	if errors.As(err, &le) {
		reason = le.err.Error()
	}
	return shareError{fmt.Sprintf("share %s %s %s: %s", sub, target, path, oneLine(reason)), err}
}

type shareError struct {
	msg string
	err error
}

func (e shareError) Error() string { return e.msg }
func (e shareError) Unwrap() error { return e.err }

// shareRead is "allox share read TARGET PATH [-o FILE]": the file's bytes to stdout, or to FILE
// (a path of the caller's own workspace, written as FILE.allox-share-tmp and renamed when whole).
func shareRead(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	const use = "use: allox share read TARGET PATH [-o FILE], e.g. allox share read agent-b/session-1 report.txt -o report.txt"
	target, path, file, err := shareFileArgs(args, "-o", use)
	if err != nil {
		return err
	}
	if err := checkTarget("read", target); err != nil {
		return err
	}
	s, err := c.client.Stream(ctx, actionShareRead, shareParams(target, path))
	if err != nil {
		return shareErr("read", target, path, c.explain(actionShareRead, err))
	}
	defer s.Close()
	if file == "" {
		if _, err := io.Copy(c.stdout, s); err != nil {
			return shareErr("read", target, path, fmt.Errorf("the transfer was cut: %w", err))
		}
		return nil
	}
	tmp := file + ".allox-share-tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return shareErr("read", target, path, fmt.Errorf("-o %s: %w", file, err))
	}
	_, cerr := io.Copy(f, s)
	if err := f.Close(); cerr == nil {
		cerr = err
	}
	if cerr == nil {
		cerr = os.Rename(tmp, file)
	}
	if cerr != nil {
		os.Remove(tmp)
		return shareErr("read", target, path, fmt.Errorf("-o %s: the transfer was cut: %w", filepath.Clean(file), cerr))
	}
	return nil
}

// shareWrite is "allox share write TARGET PATH [-i FILE]": stdin's (or FILE's) bytes become the
// target's PATH; the daemon's answer {"ok":true,"bytes":N} is printed.
func shareWrite(ctx context.Context, c *caller, args []string, stdin io.Reader) error {
	const use = "use: allox share write TARGET PATH [-i FILE], e.g. allox share write agent-b/session-1 output/notes.txt -i notes.txt"
	target, path, file, err := shareFileArgs(args, "-i", use)
	if err != nil {
		return err
	}
	if err := checkTarget("write", target); err != nil {
		return err
	}
	in := stdin
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return shareErr("write", target, path, fmt.Errorf("-i %s: %w", file, err))
		}
		defer f.Close()
		in = f
	}
	s, err := c.client.Stream(ctx, actionShareWrite, shareParams(target, path))
	if err != nil {
		return shareErr("write", target, path, c.explain(actionShareWrite, err))
	}
	defer s.Close()
	// The daemon may refuse mid-transfer (too large) and answer before all is sent: read its
	// answer concurrently so that a refusal is reported rather than a broken pipe.
	reply := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(s, maxWriteReply))
		reply <- b
	}()
	_, serr := io.Copy(s, in)
	if serr == nil {
		if cw, ok := s.(interface{ CloseWrite() error }); ok {
			serr = cw.CloseWrite()
		}
	}
	var line []byte
	select {
	case line = <-reply:
	case <-ctx.Done():
		return shareErr("write", target, path, ctx.Err())
	}
	var ans struct {
		OK    bool   `json:"ok"`
		Bytes int64  `json:"bytes"`
		Error string `json:"error"`
	}
	first, _, _ := bufio.NewReader(strings.NewReader(string(line))).ReadLine()
	if len(first) == 0 {
		if serr != nil {
			return shareErr("write", target, path, fmt.Errorf("the transfer was cut: %w", serr))
		}
		return shareErr("write", target, path, errors.New("the daemon closed the stream without an answer: nothing is known to be written"))
	}
	if err := json.Unmarshal(first, &ans); err != nil {
		return shareErr("write", target, path, fmt.Errorf("the daemon's answer %q is not JSON: %w", first, err))
	}
	if !ans.OK {
		if ans.Error == "" {
			ans.Error = "refused (the daemon gave no reason)"
		}
		return shareErr("write", target, path, errors.New(ans.Error))
	}
	return printJSON(c.stdout, first)
}

// shareFileArgs parses TARGET PATH [FLAG FILE] in any order of the flag.
func shareFileArgs(args []string, flag, use string) (target, path, file string, err error) {
	var pos []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == flag:
			if i+1 >= len(args) || args[i+1] == "" {
				return "", "", "", usagef("%s needs a FILE: %s", flag, use)
			}
			file = args[i+1]
			i++
		case strings.HasPrefix(args[i], "-") && args[i] != "-":
			return "", "", "", usagef("unknown flag %q: %s", args[i], use)
		default:
			pos = append(pos, args[i])
		}
	}
	if len(pos) != 2 {
		return "", "", "", usagef("%s", use)
	}
	return pos[0], pos[1], file, nil
}
