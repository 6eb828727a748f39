package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

func status(_ context.Context, c *Context, inv *invocation) error {
	if len(inv.pos) == 0 {
		var who map[string]any
		if err := c.call(inv, "whoami", nil, &who); err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "tenant=%v generation=%v\n", who["tenant"], who["generation"])
		return nil
	}
	var info wire.TermInfo
	if err := c.call(inv, "status", wire.TermArgs{Name: inv.pos[0]}, &info); err != nil {
		return err
	}
	if inv.has("json") {
		return json.NewEncoder(c.Stdout).Encode(info)
	}
	fmt.Fprintln(c.Stdout, describe(info))
	return nil
}

func describe(t wire.TermInfo) string {
	state := "running"
	switch {
	case t.Gone:
		state = "gone"
	case t.Unanswered:
		state = "unanswered"
	case !t.Running && t.Signal != "":
		state = fmt.Sprintf("exited(%d,%s)", t.ExitCode, t.Signal)
	case !t.Running:
		state = fmt.Sprintf("exited(%d)", t.ExitCode)
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\tpid=%d\toffset=%d", t.Name, t.ID, t.Instance, state, t.PID, t.Offset)
}

func ls(_ context.Context, c *Context, inv *invocation) error {
	var res wire.LsResult
	if err := c.call(inv, "ls", nil, &res); err != nil {
		return err
	}
	if inv.has("json") {
		return json.NewEncoder(c.Stdout).Encode(res)
	}
	if inv.has("instances") {
		printInstances(c, res.Instances)
		return nil
	}
	for _, t := range res.Terminals {
		fmt.Fprintln(c.Stdout, describe(t))
	}
	return nil
}

func screen(_ context.Context, c *Context, inv *invocation) error {
	name, err := needName(inv, "screen")
	if err != nil {
		return err
	}
	var res wire.ScreenResult
	if err := c.call(inv, "screen", wire.ScreenArgs{Name: name, Scrollback: inv.has("scrollback"), Raw: true}, &res); err != nil {
		return err
	}
	if inv.has("json") {
		if inv.has("scrollback") {
			res.History, res.HistoryText = strings.Split(res.HistoryText, "\n"), ""
		}
		return json.NewEncoder(c.Stdout).Encode(res)
	}
	if !inv.has("plain") {
		fmt.Fprintf(c.Stdout, "# cursor=%d,%d alt=%v size=%dx%d\n", res.CursorRow, res.CursorCol, res.Alt, res.Cols, res.Rows)
	}
	if inv.has("scrollback") {
		if _, err := io.WriteString(c.Stdout, res.HistoryText); err != nil {
			return err
		}
		_, err := io.WriteString(c.Stdout, "\n")
		return err
	}
	for _, l := range res.Lines {
		fmt.Fprintln(c.Stdout, l)
	}
	return nil
}

func tail(ctx context.Context, c *Context, inv *invocation) error {
	name, err := needName(inv, "tail")
	if err != nil {
		return err
	}
	from, err := offsetFlag(inv)
	if err != nil {
		return err
	}
	err = c.follow(ctx, inv, name, "", from, inv.has("follow") || inv.has("f"))
	if _, ok := err.(*ExitError); ok {
		return nil // tail reports output, not the program's status
	}
	return err
}

func transcript(ctx context.Context, c *Context, inv *invocation) error {
	name, err := needName(inv, "transcript")
	if err != nil {
		return err
	}
	conn, closeConn, err := c.openStream(ctx, inv, "transcript", wire.TailArgs{Name: name})
	if err != nil {
		return err
	}
	defer closeConn()
	return frames(conn, func(f wire.Frame) (bool, error) {
		_, err := c.Stdout.Write(f.Output)
		return f.End, err
	})
}
