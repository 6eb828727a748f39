package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/sessionshare/shareproto"
)

// BenchmarkShareRead4KiB times a 4 KiB share.read end to end through the daemon — the session
// socket, the HTTP request and its switch to a stream, the checks, openat2, the file and the
// trailer — as `allox share read` does it, from agent-a/session-1 of agent-b/session-1's file, on a
// real store, 300 samples.
func BenchmarkShareRead4KiB(b *testing.B) {
	root := btrfsRoot(b)
	bin, err := builtSessionShare()
	must(b, err)
	socks := socketsDir(b)
	url := daemonOn(b, bin, root, "--share-tools", "--session-sockets", socks)
	mustPost(b, url, `{"action":"agent.create","params":{"agent_id":"agent-a"}}`)
	mustPost(b, url, `{"action":"agent.create","params":{"agent_id":"agent-b"}}`)
	client := map[string]*rpc.Client{}
	for _, as := range [][2]string{{"agent-a", "session-1"}, {"agent-b", "session-1"}} {
		mustPost(b, url, `{"action":"session.create","params":{"agent_id":"`+as[0]+`","session_id":"`+as[1]+`"}}`)
		// The session's first run makes its socket; agent-b's also writes the file read.
		var r rpc.Run
		must(b, json.Unmarshal(mustPost(b, url, `{"action":"process.start","params":{"agent_id":"`+as[0]+`","session_id":"`+as[1]+
			`","argv":["/bin/sh","-c","head -c 4096 /dev/urandom > small.bin"]}}`), &r))
		mustPost(b, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`)
		c := rpc.NewUnixClient(filepath.Join(socks, daemon.SessionRef{AgentID: as[0], SessionID: as[1]}.Hash()+".sock"))
		must(b, c.Call(context.Background(), shareproto.ActionEnable, nil, nil))
		client[as[0]] = c
	}
	read := func() time.Duration {
		start := time.Now()
		s, err := client["agent-a"].Stream(context.Background(), shareproto.ActionRead, shareproto.PathParams{Target: "agent-b/session-1", Path: "small.bin"})
		must(b, err)
		defer s.Close()
		br := bufio.NewReader(s)
		var h shareproto.ReadHeader
		line, err := br.ReadBytes('\n')
		must(b, err)
		must(b, json.Unmarshal(line, &h))
		if _, err := io.CopyN(io.Discard, br, h.Size); err != nil {
			b.Fatal(err)
		}
		var res shareproto.Result
		line, err = br.ReadBytes('\n')
		must(b, err)
		must(b, json.Unmarshal(line, &res))
		if !res.OK || h.Size != 4096 {
			b.Fatalf("read: header %+v, result %+v", h, res)
		}
		return time.Since(start)
	}
	read() // warm: the first connection, the file in the page cache
	var d []time.Duration
	for range 300 {
		d = append(d, read())
	}
	b.ReportMetric(ms(p50(d)), "p50-ms")
	b.ReportMetric(ms(p99(d)), "p99-ms")
	b.ReportMetric(float64(len(d)), "samples")
}
