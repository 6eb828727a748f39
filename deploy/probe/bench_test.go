package probe

import (
	"context"
	"fmt"
	"github.com/allox-os/allox/internal/testenv"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/gateway"
	"github.com/allox-os/allox/deploy/probe/internal/pki"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/btrfstest"
	"github.com/allox-os/allox/internal/rpc"
)

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// benchFleet is a Gateway process (embedded etcd), a Probe process and its appliance (the
// workspace daemon on Btrfs) running DevBox alpha, with a client of the Gateway's etcd.
func benchFleet(b *testing.B, gatewayVia func(url string) string) (f *fleet, a *wire.AdminClient, cli *clientv3.Client, h *probeHost, endpoint, token string) {
	needBtrfs(b)
	store := btrfstest.Mount(b)
	f = newFleetTB(b)
	url, etcd, _ := f.gateway("a", "")
	h = f.probe("host-a", gatewayVia(url), store, 4)
	a = f.admin(url)
	runGatewayCLI(f.t, f, url, "apply", writeSpec(f.t, alphaSpec))
	eventually(b, "alpha running", running(b, a, "alpha", "host-a"))
	var err error
	if cli, err = gateway.Connect([]string{etcd}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	endpoint, token, _ = h.sandbox(b, "alpha")
	return
}

// BenchmarkIntents sends session checkpoints as Gateway ops (operator API → etcd → the Probe's
// pull → the appliance → the Probe's report → the result in etcd) and times each until its
// result is written, beside the same checkpoint.create sent straight to the appliance in the
// same run (the ratio is the control path's cost). Then it sends ops 16 at a time for the rate.
func BenchmarkIntents(b *testing.B) {
	_, a, cli, _, endpoint, token := benchFleet(b, func(u string) string { return u })
	direct := rpc.NewClient(endpoint, token, nil)
	ctx := b.Context()
	op := func(i int) time.Duration {
		start := time.Now()
		var id map[string]string
		wch := cli.Watch(ctx, "/allox/result/", clientv3.WithPrefix())
		if err := a.Do(ctx, http.MethodPost, wire.PathOps, wire.Op{DevBox: "alpha", Kind: wire.IntentCheckpoint, Session: "s1", Checkpoint: fmt.Sprintf("g%d", i)}, &id); err != nil {
			b.Fatal(err)
		}
		for resp := range wch {
			for _, ev := range resp.Events {
				if strings.HasSuffix(string(ev.Kv.Key), id["id"]) {
					if strings.Contains(string(ev.Kv.Value), `"failed"`) {
						b.Fatalf("op failed: %s", ev.Kv.Value)
					}
					return time.Since(start)
				}
			}
		}
		b.Fatal("watch ended")
		return 0
	}
	const n = 200
	var viaGateway, straight []time.Duration
	for i := range n {
		viaGateway = append(viaGateway, op(i))
		start := time.Now()
		if err := direct.Call(ctx, rpc.ActionCheckpointCreate, map[string]any{"agent_id": "main", "session_id": "s1", "checkpoint_id": fmt.Sprintf("d%d", i)}, nil); err != nil {
			b.Fatal(err)
		}
		straight = append(straight, time.Since(start))
	}
	const total, inFlight = 400, 16
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range inFlight {
		wg.Go(func() {
			for i := range next {
				op(n + i)
			}
		})
	}
	for i := range total {
		next <- i
	}
	close(next)
	wg.Wait()
	rate := float64(total) / time.Since(start).Seconds()
	b.ReportMetric(msOf(testenv.Percentile(viaGateway, 50)), "intent-p50-ms")
	b.ReportMetric(msOf(testenv.Percentile(viaGateway, 99)), "intent-p99-ms")
	b.ReportMetric(msOf(testenv.Percentile(straight, 50)), "direct-p50-ms")
	b.ReportMetric(float64(testenv.Percentile(viaGateway, 50))/float64(testenv.Percentile(straight, 50)), "ratio-p50")
	b.ReportMetric(rate, "intents/s")
	b.Logf("%d sequential samples each way, then %d ops %d in flight", n, total, inFlight)
}

// BenchmarkLossToFence cuts the Probe off from its Gateway and times until the appliance's
// session.get shows the session fenced; after each sample the partition heals and the DevBox
// is re-issued under the Probe's new epoch (which lifts the fence).
func BenchmarkLossToFence(b *testing.B) {
	var px *proxy
	_, a, _, _, endpoint, token := benchFleet(b, func(u string) string {
		px = newProxy(b, strings.TrimPrefix(u, "https://"))
		return px.URL()
	})
	const samples = 5
	var took []time.Duration
	for range samples {
		px.partition(true)
		start := time.Now()
		for {
			s, err := session(b, endpoint, token, "s1")
			if err == nil && s.Fenced != nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		took = append(took, time.Since(start))
		px.partition(false)
		eventually(b, "alpha unfenced again", func() bool {
			s, err := session(b, endpoint, token, "s1")
			return err == nil && s.Fenced == nil && running(b, a, "alpha", "host-a")()
		})
	}
	b.ReportMetric(msOf(testenv.Percentile(took, 50)), "fence-p50-ms")
	b.ReportMetric(msOf(slices.Max(took)), "fence-max-ms")
	b.ReportMetric(msOf(stopAfter), "stop_after-ms")
	b.ReportMetric(float64(slices.Max(took))/float64(stopAfter), "max/stop_after")
	b.Logf("%d samples; target: at most stop_after + 1s = %v", samples, stopAfter+time.Second)
}

// BenchmarkGatewayHeap1000Probes runs a Gateway in this process (embedded etcd included) and
// 1,000 simulated Probes in a child process, each registering and heartbeating over its own mutual
// TLS connection; it reports the heap in use after GC, beside the same Gateway with no Probes.
func BenchmarkGatewayHeap1000Probes(b *testing.B) {
	e, err := gateway.StartEmbedded(b.TempDir(), "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	cli, err := gateway.Connect([]string{e.Endpoint})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	g, err := gateway.New(cli, gateway.Config{Replica: "bench", RenewEvery: 2500 * time.Millisecond, StopAfter: 7 * time.Second, LostAfter: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	f := newFleetTB(b)
	srv := httptest.NewUnstartedServer(g.Handler())
	if srv.TLS, err = pki.ServerConfig(filepath.Join(f.pki, pki.CAFile), filepath.Join(f.pki, "server.pem"), filepath.Join(f.pki, "server-key.pem")); err != nil {
		b.Fatal(err)
	}
	srv.StartTLS()
	defer srv.Close()
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	go g.RunLoops(ctx)
	heap := func() float64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapInuse) / (1 << 20)
	}
	time.Sleep(2 * time.Second)
	idle := heap()
	const n = 1000
	for i := range n {
		if err := f.ca.IssueFiles(f.pki, fmt.Sprintf("sim-%04d", i), fmt.Sprintf("sim-%04d", i), wire.RoleProbe); err != nil {
			b.Fatal(err)
		}
	}
	swarm := exec.CommandContext(ctx, os.Args[0], "-test.run", "^$")
	swarm.Env = append(os.Environ(), "ALLOX_PROBE_SWARM="+srv.URL+","+strconv.Itoa(n)+","+f.pki)
	swarm.Stderr = os.Stderr
	if err := swarm.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { swarm.Process.Kill(); swarm.Wait() }()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		resp, err := cli.Get(ctx, "/allox/host/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == 2*n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("not all %d probes registered in 5m", n)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(10 * time.Second) // four heartbeat rounds
	busy := heap()
	b.ReportMetric(idle, "idle-heap-MiB")
	b.ReportMetric(busy, "heap-1000-probes-MiB")
	b.ReportMetric((busy-idle)*1024/n, "KiB/probe")
}

// runSwarm is the child of BenchmarkGatewayHeap1000Probes: n simulated Probes heartbeating.
func runSwarm(spec string) {
	parts := strings.SplitN(spec, ",", 3)
	n, _ := strconv.Atoi(parts[1])
	url, dir := parts[0], parts[2]
	var wg sync.WaitGroup
	for i := range n {
		host := fmt.Sprintf("sim-%04d", i)
		tc, err := pki.ClientConfig(filepath.Join(dir, pki.CAFile), filepath.Join(dir, host+".pem"), filepath.Join(dir, host+"-key.pem"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		p, _ := wire.NewProbeClient(host, []string{url}, tc)
		wg.Go(func() {
			ctx := context.Background()
			var g wire.Grant
			for g.Epoch == 0 {
				g, _ = p.Register(ctx, wire.Register{Host: host, Capacity: wire.Capacity{Slots: 4}})
				time.Sleep(100 * time.Millisecond)
			}
			for {
				time.Sleep(g.RenewEvery)
				if ng, err := p.Heartbeat(ctx, wire.Heartbeat{Host: host, Epoch: g.Epoch, Capacity: wire.Capacity{Slots: 4}, Healthy: true}); err == nil {
					g = ng
				}
			}
		})
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
}
