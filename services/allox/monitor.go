package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// monitorTyped are the monitor plugin's subcommands: they report spans, events and metrics for
// frameworks without OpenTelemetry, and read the session's records, summary and report.
var monitorTyped = map[string]func(context.Context, *caller, []string, io.Reader) error{
	"span":    monitorSpan,
	"event":   monitorEvent,
	"metric":  monitorMetric,
	"records": monitorRecords,
	"summary": monitorSummary,
	"report":  monitorReport,
}

const monitorSubs = "span NAME [--category tool|model|agent|span] [--duration-ms MS] [--status ok|error] [--error MSG] [--turn ID] [--attr K=V]... | " +
	"event NAME [--attr K=V]... | metric NAME VALUE [--unit U] [--attr K=V]... | records [span|event|metric|run] | summary | report [-o FILE]"

// attrs is a repeatable --attr K=V; V is a number or true/false when it reads as one.
type attrs map[string]any

func (a attrs) String() string { return "" }
func (a attrs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("--attr %q: use KEY=VALUE, e.g. --attr gen_ai.tool.name=read_file", s)
	}
	switch {
	case isInt(v):
		n, _ := strconv.ParseInt(v, 10, 64)
		a[k] = n
	case v == "true" || v == "false":
		a[k] = v == "true"
	default:
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			a[k] = f
		} else {
			a[k] = v
		}
	}
	return nil
}

func isInt(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// monitorFlags parses args: positional arguments first (want of them), then flags.
func monitorFlags(sub string, args []string, want int, def func(*flag.FlagSet)) ([]string, error) {
	if len(args) < want {
		return nil, usagef("use: allox monitor %s", monitorSubs)
	}
	fs := flag.NewFlagSet("allox monitor "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def(fs)
	if err := fs.Parse(args[want:]); err != nil {
		return nil, usagef("allox monitor %s: %v (use: allox monitor %s)", sub, err, monitorSubs)
	}
	if fs.NArg() > 0 {
		return nil, usagef("allox monitor %s: unexpected %q (use: allox monitor %s)", sub, fs.Arg(0), monitorSubs)
	}
	return args[:want], nil
}

func monitorSpan(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	a := attrs{}
	var category, status, errMsg, turn string
	var ms float64
	pos, err := monitorFlags("span", args, 1, func(fs *flag.FlagSet) {
		fs.StringVar(&category, "category", "", "")
		fs.StringVar(&status, "status", "", "")
		fs.StringVar(&errMsg, "error", "", "")
		fs.StringVar(&turn, "turn", "", "")
		fs.Float64Var(&ms, "duration-ms", 0, "")
		fs.Var(a, "attr", "")
	})
	if err != nil {
		return err
	}
	p := map[string]any{"name": pos[0]}
	for k, v := range map[string]string{"category": category, "status": status, "error": errMsg, "turn_id": turn} {
		if v != "" {
			p[k] = v
		}
	}
	if ms != 0 {
		p["duration_ms"] = ms
	}
	if len(a) > 0 {
		p["attributes"] = a
	}
	return c.call(ctx, "monitor.span", p)
}

func monitorEvent(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	a := attrs{}
	pos, err := monitorFlags("event", args, 1, func(fs *flag.FlagSet) { fs.Var(a, "attr", "") })
	if err != nil {
		return err
	}
	p := map[string]any{"name": pos[0]}
	if len(a) > 0 {
		p["attributes"] = a
	}
	return c.call(ctx, "monitor.event", p)
}

func monitorMetric(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	a := attrs{}
	var unit string
	pos, err := monitorFlags("metric", args, 2, func(fs *flag.FlagSet) {
		fs.StringVar(&unit, "unit", "", "")
		fs.Var(a, "attr", "")
	})
	if err != nil {
		return err
	}
	v, err := strconv.ParseFloat(pos[1], 64)
	if err != nil {
		return usagef("allox monitor metric %s %s: VALUE must be a number, e.g. 42", pos[0], pos[1])
	}
	p := map[string]any{"name": pos[0], "value": v}
	if unit != "" {
		p["unit"] = unit
	}
	if len(a) > 0 {
		p["attributes"] = a
	}
	return c.call(ctx, "monitor.metric", p)
}

func monitorRecords(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	if len(args) > 1 {
		return usagef("use: allox monitor records [span|event|metric|run]")
	}
	p := map[string]any{}
	if len(args) == 1 {
		p["kind"] = args[0]
	}
	return c.call(ctx, "monitor.records", p)
}

func monitorSummary(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	if len(args) != 0 {
		return usagef("use: allox monitor summary (the caller's session)")
	}
	return c.call(ctx, "monitor.summary", nil)
}

// monitorReport writes the session's HTML report to stdout or -o FILE.
func monitorReport(ctx context.Context, c *caller, args []string, _ io.Reader) error {
	var out string
	if _, err := monitorFlags("report", args, 0, func(fs *flag.FlagSet) { fs.StringVar(&out, "o", "", "") }); err != nil {
		return err
	}
	var res struct {
		HTML string `json:"html"`
	}
	var raw json.RawMessage
	if err := c.client.Call(ctx, "monitor.report", nil, &raw); err != nil {
		return c.explain("monitor.report", err)
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("monitor.report: the daemon's result does not decode: %w", err)
	}
	if out == "" {
		_, err := io.WriteString(c.stdout, res.HTML)
		return err
	}
	return os.WriteFile(out, []byte(res.HTML), 0o644)
}
