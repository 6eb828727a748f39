package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/tracked"
)

func p50(d []time.Duration) time.Duration { return percentile(d, 50) }

func p99(d []time.Duration) time.Duration { return percentile(d, 99) }

// percentile is the q-th percentile of d (nearest rank below).
func percentile(d []time.Duration, q int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*q/100]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkProcessStartTrue times process.start + process.wait of /bin/true through the RPC API —
// sandbox, cgroup, run record and all — beside a bare fork/exec of the same argv in the same run.
func BenchmarkProcessStartTrue(b *testing.B) {
	url := daemonOn(b, build(b), btrfsRoot(b))
	mustPost(b, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(b, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	var ours, bare []time.Duration
	for b.Loop() {
		start := time.Now()
		var r rpc.Run
		must(b, json.Unmarshal(mustPost(b, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/true"]}}`), &r))
		mustPost(b, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`)
		ours = append(ours, time.Since(start))
		start = time.Now()
		must(b, exec.Command("/bin/true").Run())
		bare = append(bare, time.Since(start))
	}
	b.ReportMetric(ms(p50(ours)), "rpc-p50-ms")
	b.ReportMetric(ms(p50(bare)), "bare-p50-ms")
	b.ReportMetric(ms(p50(ours)-p50(bare)), "overhead-p50-ms")
	b.ReportMetric(float64(p50(ours))/float64(p50(bare)), "ratio")
}

// BenchmarkRollbackKill times session.rollback with kill_processes while a run and its background
// child are alive, beside a rollback of the same session with nothing to kill, in the same run.
func BenchmarkRollbackKill(b *testing.B) {
	url := daemonOn(b, build(b), btrfsRoot(b), "--turn-checkpoints")
	mustPost(b, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(b, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	const rollback = `{"action":"session.rollback","params":{"agent_id":"a","session_id":"s","checkpoint_id":"baseline","kill_processes":true}}`
	var kill, quiet []time.Duration
	for b.Loop() {
		mustPost(b, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/sh","-c","sleep 300 & sleep 300"]}}`)
		time.Sleep(20 * time.Millisecond) // let the background child start
		start := time.Now()
		mustPost(b, url, rollback)
		kill = append(kill, time.Since(start))
		start = time.Now()
		mustPost(b, url, rollback)
		quiet = append(quiet, time.Since(start))
	}
	b.ReportMetric(ms(p50(kill)), "kill-p50-ms")
	b.ReportMetric(ms(p50(quiet)), "quiet-p50-ms")
	b.ReportMetric(float64(p50(kill))/float64(p50(quiet)), "ratio")
}

// noopPlugin is a plugin that takes part in every run and does nothing: its Run returns a hook
// whose Begin and End return no metadata.
func noopPlugin(name string) plugin.Plugin {
	return plugin.Plugin{Manifest: plugin.Manifest{Name: name, API: plugin.APIVersion, Version: "0"}, Flag: "--" + name, Enabled: true,
		Open: func(context.Context, plugin.Core) (*plugin.Contribution, error) {
			return &plugin.Contribution{Run: func(context.Context, *plugin.RunStart) (plugin.RunHook, error) { return noopHook{}, nil }}, nil
		}}
}

type noopHook struct{}

func (noopHook) Begin(*tracked.Status) (json.RawMessage, error)      { return nil, nil }
func (noopHook) End(*tracked.Status, error) (json.RawMessage, error) { return nil, nil }

// BenchmarkPluginAPICost times process.start + process.wait of /bin/true on two daemons served in
// this process, one with no plugin and one with three no-op plugins loaded (each with a run hook,
// so the run's cgroup is frozen and thawed around their Begin and End), alternating between them
// in the same run, each on its own real Btrfs store.
func BenchmarkPluginAPICost(b *testing.B) {
	zero, _, _, _ := inProcess(b, btrfsRoot(b), nil)
	three, _, _, _ := inProcess(b, btrfsRoot(b), []plugin.Plugin{noopPlugin("noop-1"), noopPlugin("noop-2"), noopPlugin("noop-3")})
	for _, url := range []string{zero, three} {
		mustPost(b, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
		mustPost(b, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	}
	startWait := func(url string) time.Duration {
		start := time.Now()
		var r rpc.Run
		must(b, json.Unmarshal(mustPost(b, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/true"]}}`), &r))
		mustPost(b, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`)
		return time.Since(start)
	}
	var without, with []time.Duration
	for b.Loop() {
		without = append(without, startWait(zero))
		with = append(with, startWait(three))
	}
	b.ReportMetric(ms(p50(without)), "zero-plugins-p50-ms")
	b.ReportMetric(ms(p50(with)), "three-noop-plugins-p50-ms")
	b.ReportMetric(ms(p50(with)-p50(without)), "api-cost-p50-ms")
	b.ReportMetric(float64(p50(with))/float64(p50(without)), "ratio")
}
