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

	"github.com/allox-os/allox/services/internal/sessionshare/shareproto"
)

// maxResultLine bounds the daemon's one-line headers and results on the share streams.
const maxResultLine = 64 << 10

var shareTyped = map[string]func(context.Context, *caller, []string, io.Reader) error{
	"enable":  shareEnable,
	"disable": shareNoArgs("disable", shareproto.ActionDisable),
	"status":  shareNoArgs("status", shareproto.ActionStatus),
	"ls":      shareLs,
	"stat":    shareStat,
	"read":    shareRead,
	"write":   shareWrite,
}

// shareEnable is "allox share enable [--scope DIR] [--permission read|write]".
func shareEnable(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	const use = "use: allox share enable [--scope DIR] [--permission read|write] (DIR is a directory of current/, e.g. output; the default is all of current/, read-only)"
	var params shareproto.EnableParams
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
			params.Scope = value
		case "--permission":
			if value != shareproto.Read && value != shareproto.Write {
				return usagef("allox share enable: --permission %q: use read or write", value)
			}
			params.Permission = value
		default:
			return usagef("allox share enable: unknown flag %q: %s", name, use)
		}
		if strings.Contains(args[0], "=") {
			args = args[1:]
		} else {
			args = args[2:]
		}
	}
	return c.call(ctx, shareproto.ActionEnable, params)
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
	return shareCall(ctx, c, "ls", shareproto.ActionLs, args[0], path)
}

// shareStat is "allox share stat TARGET PATH".
func shareStat(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	if len(args) != 2 {
		return usagef("use: allox share stat TARGET PATH, e.g. allox share stat agent-b/session-1 report.txt")
	}
	return shareCall(ctx, c, "stat", shareproto.ActionStat, args[0], args[1])
}

func shareCall(ctx context.Context, c *caller, sub, action, target, path string) error {
	if err := checkTarget(sub, target); err != nil {
		return err
	}
	if err := c.call(ctx, action, shareproto.PathParams{Target: target, Path: path}); err != nil {
		return shareErr(sub, target, path, err)
	}
	return nil
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
	reason = oneLine(reason)
	if strings.Contains(reason, target) && strings.Contains(reason, path) { // the daemon named them
		return shareError{fmt.Sprintf("share %s: %s", sub, reason), err}
	}
	return shareError{fmt.Sprintf("share %s %s %s: %s", sub, target, path, reason), err}
}

type shareError struct {
	msg string
	err error
}

func (e shareError) Error() string { return e.msg }
func (e shareError) Unwrap() error { return e.err }

// shareRead is "allox share read TARGET PATH [-o FILE]": the file's bytes to stdout, or to FILE
// (a path of the caller's own workspace, written as FILE.allox-share-tmp and renamed only once
// the daemon's trailer says the whole file came). On stdout a cut transfer leaves what came
// written, and fails.
func shareRead(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	const use = "use: allox share read TARGET PATH [-o FILE], e.g. allox share read agent-b/session-1 report.txt -o report.txt"
	target, path, file, err := shareFileArgs(args, "-o", use)
	if err != nil {
		return err
	}
	if err := checkTarget("read", target); err != nil {
		return err
	}
	s, err := c.client.Stream(ctx, shareproto.ActionRead, shareproto.PathParams{Target: target, Path: path})
	if err != nil {
		return shareErr("read", target, path, c.explain(shareproto.ActionRead, err))
	}
	defer s.Close()
	if file == "" {
		if err := receiveFile(s, c.stdout); err != nil {
			return shareErr("read", target, path, err)
		}
		return nil
	}
	tmp := file + ".allox-share-tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return shareErr("read", target, path, fmt.Errorf("-o %s: %w", file, err))
	}
	rerr := receiveFile(s, f)
	if err := f.Close(); rerr == nil && err != nil {
		rerr = fmt.Errorf("-o %s: %w", file, err)
	}
	if rerr == nil {
		rerr = os.Rename(tmp, file)
	}
	if rerr != nil {
		os.Remove(tmp)
		return shareErr("read", target, path, fmt.Errorf("%w (-o %s is left as it was)", rerr, filepath.Clean(file)))
	}
	return nil
}

// receiveFile reads a share.read stream into w: the header line, exactly its size in bytes, and
// the trailer, which must say ok with that many bytes.
func receiveFile(s io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(s, 1<<20)
	var h shareproto.ReadHeader
	if err := readLine(br, &h); err != nil {
		return fmt.Errorf("the stream's header: %w", err)
	}
	if h.Size < 0 {
		return fmt.Errorf("the stream's header gives a negative size, %d", h.Size)
	}
	n, err := io.Copy(w, io.LimitReader(br, h.Size))
	if err != nil {
		return fmt.Errorf("the transfer was cut after %d of %d bytes: %w", n, h.Size, err)
	}
	if n < h.Size {
		return fmt.Errorf("the transfer was cut after %d of %d bytes (the daemon ended it)", n, h.Size)
	}
	var res shareproto.Result
	if err := readLine(br, &res); err != nil {
		return fmt.Errorf("the transfer was cut after all %d bytes, before the daemon confirmed them: %w", n, err)
	}
	return resultErr(res, n)
}

// resultErr is a Result's error: nil only for ok with exactly want bytes.
func resultErr(res shareproto.Result, want int64) error {
	switch {
	case !res.OK && res.Error == "":
		return errors.New("refused (the daemon gave no reason)")
	case !res.OK && res.Code != "":
		return fmt.Errorf("%s: %s", res.Code, res.Error)
	case !res.OK:
		return errors.New(res.Error)
	case res.Bytes != want:
		return fmt.Errorf("the daemon confirmed %d bytes of %d", res.Bytes, want)
	}
	return nil
}

// readLine decodes one JSON line of at most maxResultLine bytes.
func readLine(br *bufio.Reader, v any) error {
	var line []byte
	for {
		part, more, err := br.ReadLine()
		line = append(line, part...)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the stream ended")
			}
			return err
		}
		if len(line) > maxResultLine {
			return fmt.Errorf("a line longer than %d bytes", maxResultLine)
		}
		if !more {
			break
		}
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("%q is not the protocol's JSON line: %w", line, err)
	}
	return nil
}

// shareWrite is "allox share write TARGET PATH [-i FILE]": stdin's (or FILE's) bytes become the
// target's PATH. The daemon needs the exact size first: a regular file (FILE, or stdin redirected
// from one) is sent as it is, other stdin is spooled to a temporary file (in the run's private
// /tmp) first. Only the daemon's {"ok":true,"bytes":N} means the file was written; it is printed.
func shareWrite(ctx context.Context, c *caller, args []string, stdin io.Reader) error {
	const use = "use: allox share write TARGET PATH [-i FILE], e.g. allox share write agent-b/session-1 output/notes.txt -i notes.txt"
	target, path, file, err := shareFileArgs(args, "-i", use)
	if err != nil {
		return err
	}
	if err := checkTarget("write", target); err != nil {
		return err
	}
	in, size, done, err := sizedInput(stdin, file)
	if err != nil {
		return shareErr("write", target, path, err)
	}
	defer done()
	s, err := c.client.Stream(ctx, shareproto.ActionWrite, shareproto.WriteParams{Target: target, Path: path, Size: size})
	if err != nil {
		return shareErr("write", target, path, c.explain(shareproto.ActionWrite, err))
	}
	defer s.Close()
	// The daemon may fail the write mid-transfer and answer before all is sent: read its answer
	// concurrently, so that its reason is reported rather than a broken pipe.
	type answer struct {
		res shareproto.Result
		err error
	}
	reply := make(chan answer, 1)
	go func() {
		var a answer
		a.err = readLine(bufio.NewReader(s), &a.res)
		reply <- a
	}()
	n, serr := io.Copy(s, io.LimitReader(in, size))
	if serr == nil && n < size {
		serr = fmt.Errorf("the input shrank while it was sent: %d of %d bytes", n, size)
	}
	if serr == nil {
		if cw, ok := s.(interface{ CloseWrite() error }); ok {
			serr = cw.CloseWrite()
		}
	}
	var a answer
	select {
	case a = <-reply:
	case <-ctx.Done():
		return shareErr("write", target, path, fmt.Errorf("%w: nothing is known to be written", ctx.Err()))
	}
	if a.err != nil {
		if serr != nil {
			return shareErr("write", target, path, fmt.Errorf("the transfer was cut after %d of %d bytes: %w", n, size, serr))
		}
		return shareErr("write", target, path, fmt.Errorf("no answer from the daemon (%w): nothing is known to be written", a.err))
	}
	if err := resultErr(a.res, size); err != nil {
		return shareErr("write", target, path, err)
	}
	out, _ := json.Marshal(a.res)
	return printJSON(c.stdout, out)
}

// sizedInput is the write's input with its exact size: FILE, stdin if it is a regular file, or
// stdin spooled to a temporary file. done releases it.
func sizedInput(stdin io.Reader, file string) (io.Reader, int64, func(), error) {
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, 0, nil, fmt.Errorf("-i %s: %w", file, err)
		}
		st, err := f.Stat()
		if err == nil && !st.Mode().IsRegular() {
			err = errors.New("not a regular file")
		}
		if err != nil {
			f.Close()
			return nil, 0, nil, fmt.Errorf("-i %s: %w", file, err)
		}
		return f, st.Size(), func() { f.Close() }, nil
	}
	if f, ok := stdin.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			pos, err := f.Seek(0, io.SeekCurrent)
			if err == nil {
				return f, st.Size() - pos, func() {}, nil
			}
		}
	}
	spool, err := os.CreateTemp("", "allox-share-write-")
	if err != nil {
		return nil, 0, nil, fmt.Errorf("spool stdin (its size is needed first): %w", err)
	}
	done := func() { spool.Close(); os.Remove(spool.Name()) }
	n, err := io.Copy(spool, stdin)
	if err == nil {
		_, err = spool.Seek(0, io.SeekStart)
	}
	if err != nil {
		done()
		return nil, 0, nil, fmt.Errorf("spool stdin (its size is needed first): %w", err)
	}
	return spool, n, done, nil
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
