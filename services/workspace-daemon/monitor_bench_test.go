package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
)

// BenchmarkMonitorProcessStart times process.start + process.wait of /bin/true with the monitor
// enabled (its endpoint in the run's environment, its hooks, the run's usage read from its cgroup
// and journalled) beside the same daemon binary with the monitor not enabled, interleaved in the
// same run. Target: at most 1 ms added at p50.
func BenchmarkMonitorProcessStart(b *testing.B) {
	bin, err := builtMonitor()
	must(b, err)
	off := daemonOn(b, bin, btrfsRoot(b))
	on := daemonOn(b, bin, btrfsRoot(b), "--monitor-root", filepath.Join(b.TempDir(), "monitor"))
	for _, url := range []string{off, on} {
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
	startWait(on) // the session's receiver opens at its first run
	var withMon, without []time.Duration
	for b.Loop() {
		without = append(without, startWait(off))
		withMon = append(withMon, startWait(on))
	}
	b.ReportMetric(ms(p50(withMon)), "monitor-p50-ms")
	b.ReportMetric(ms(p50(without)), "off-p50-ms")
	b.ReportMetric(ms(p50(withMon)-p50(without)), "added-p50-ms")
	b.ReportMetric(float64(p50(withMon))/float64(p50(without)), "ratio")
}
