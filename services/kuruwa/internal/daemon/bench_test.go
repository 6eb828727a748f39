package daemon_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/services/kuruwa/internal/entry"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// BenchmarkKuruwaVersusTmux measures CLI round trips — a fresh process per operation, as an agent
// runs them — for kuruwa and for Debian's tmux on the same machine in the same run, and reports
// p50/p99 of each and their ratio (tmux/kuruwa: above 1 means kuruwa is faster), beside the two
// floors, each exec'd the same way in the same loop: an empty static Go program (any Go CLI) and
// /bin/true (any CLI at all). Run with
// -benchtime 200x (make bench-kuruwa) for p99 over 200 samples.
func BenchmarkKuruwaVersusTmux(b *testing.B) {
	tmux := testenv.Tool(b, "tmux", "apt-get install tmux (ci/deps.sh)")
	dir, err := os.MkdirTemp("/tmp", "kwb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	daemon := exec.Command(kuruwaBin, "daemon", "--dir", filepath.Join(dir, "k"))
	if err := daemon.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = daemon.Process.Signal(os.Interrupt); _ = daemon.Wait() }()
	floor := emptyGoProgram(b, dir)
	// /bin/true is the floor under any CLI call in any language: what starting a process costs.
	trueBin := testenv.Tool(b, "true", "apt-get install coreutils")
	ep := filepath.Join(dir, "k", "manage", "sock")
	tsock := filepath.Join(dir, "tmux.sock")
	kw := func(args ...string) error {
		return exec.Command(kuruwaBin, append([]string{"--entry", ep}, args...)...).Run()
	}
	tm := func(args ...string) error {
		return exec.Command(tmux, append([]string{"-S", tsock, "-f", "/dev/null"}, args...)...).Run()
	}
	for deadline := time.Now().Add(10 * time.Second); kw("ls") != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("kuruwa daemon did not start")
		}
	}
	defer tm("kill-server")
	fill := "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; exec cat >/dev/null"
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(kw("start", "main", "--instance", "host", "--", "sh", "-c", fill))
	must(tm("new-session", "-d", "-s", "main", "-x", "80", "-y", "24", "sh -c '"+fill+"'"))
	must(tm("set-option", "-g", "history-limit", "10000"))
	time.Sleep(500 * time.Millisecond)

	type op struct {
		name   string
		kuruwa func(i int) error
		tmux   func(i int) error
		rpc    func(c *wire.Conn) error // the same operation without the CLI process
	}
	// create makes terminals and sessions that terminate removes again; it runs after the others so
	// that ls lists the one terminal (and session) the others use.
	var made, made2 []string
	seq := 0
	fresh := func() string { seq++; return fmt.Sprintf("b%d", seq) }
	conn := func() *wire.Conn {
		uc, err := entry.Dial(ep)
		must(err)
		return wire.NewConn(uc)
	}
	ops := []op{
		{"ls", func(int) error { return kw("ls") }, func(int) error { return tm("list-sessions") },
			func(c *wire.Conn) error { return c.Call("ls", nil, nil) }},
		{"send", func(int) error { return kw("send", "main", "hello") }, func(int) error { return tm("send-keys", "-t", "main", "-l", "hello") },
			func(c *wire.Conn) error { return c.Call("send", wire.SendArgs{Name: "main", Text: "hello"}, nil) }},
		{"screen", func(int) error { return kw("screen", "main") }, func(int) error { return tm("capture-pane", "-p", "-t", "main") },
			func(c *wire.Conn) error { return c.Call("screen", wire.ScreenArgs{Name: "main"}, nil) }},
		{"scrollback", func(int) error { return kw("screen", "main", "--scrollback") },
			func(int) error { return tm("capture-pane", "-p", "-S", "-", "-t", "main") },
			func(c *wire.Conn) error {
				return c.Call("screen", wire.ScreenArgs{Name: "main", Scrollback: true, Raw: true}, nil)
			}},
		{"create", func(int) error {
			n := fresh()
			made = append(made, n)
			return kw("start", n, "--instance", "host", "--", "cat")
		},
			func(int) error {
				n := fresh()
				made2 = append(made2, n)
				return tm("new-session", "-d", "-s", n, "cat")
			},
			func(c *wire.Conn) error {
				n := fresh()
				made = append(made, n)
				return c.Call("start", wire.StartArgs{Name: n, Instance: "host", Argv: []string{"cat"}}, nil)
			}},
		{"terminate", func(int) error { return kw("clean", pop(&made, kw), "--force") },
			func(int) error { return tm("kill-session", "-t", pop(&made2, nil)) },
			func(c *wire.Conn) error {
				return c.Call("clean", wire.CleanArgs{Name: pop(&made, kw), Force: true}, nil)
			}},
	}
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			var ks, ts, rs, fs, ns []time.Duration
			c := conn()
			defer c.Close()
			for i := 0; i < b.N; i++ {
				// Alternate the two so drift on a shared machine hits both alike.
				start := time.Now()
				must(o.kuruwa(i))
				ks = append(ks, time.Since(start))
				start = time.Now()
				must(o.tmux(i))
				ts = append(ts, time.Since(start))
				start = time.Now()
				must(o.rpc(c))
				rs = append(rs, time.Since(start))
				start = time.Now()
				must(exec.Command(floor).Run())
				fs = append(fs, time.Since(start))
				start = time.Now()
				must(exec.Command(trueBin).Run())
				ns = append(ns, time.Since(start))
			}
			kp50, kp99 := percentiles(ks)
			tp50, tp99 := percentiles(ts)
			rp50, rp99 := percentiles(rs)
			fp50, _ := percentiles(fs)
			np50, _ := percentiles(ns)
			b.ReportMetric(ms(rp50), "rpc-p50-ms")
			b.ReportMetric(ms(rp99), "rpc-p99-ms")
			b.ReportMetric(ms(kp50), "kuruwa-p50-ms")
			b.ReportMetric(ms(kp99), "kuruwa-p99-ms")
			b.ReportMetric(ms(tp50), "tmux-p50-ms")
			b.ReportMetric(ms(tp99), "tmux-p99-ms")
			b.ReportMetric(float64(tp50)/float64(kp50), "tmux/kuruwa-p50")
			b.ReportMetric(ms(fp50), "empty-go-p50-ms")
			b.ReportMetric(float64(tp50)/float64(fp50), "tmux/empty-go-p50")
			b.ReportMetric(ms(np50), "true-p50-ms")
			b.ReportMetric(float64(tp50)/float64(np50), "tmux/true-p50")
			b.ReportMetric(float64(len(ks)), "samples")
			b.Logf("%s: kuruwa CLI p50 %.2fms p99 %.2fms; tmux CLI p50 %.2fms p99 %.2fms (tmux/kuruwa %.2f); kuruwa without the CLI process p50 %.2fms p99 %.2fms; an empty static Go program p50 %.2fms (tmux/empty %.2f: the most any Go CLI could be faster than tmux); /bin/true p50 %.2fms (tmux/true %.2f: the most any CLI at all could be); %d samples",
				o.name, ms(kp50), ms(kp99), ms(tp50), ms(tp99), float64(tp50)/float64(kp50), ms(rp50), ms(rp99), ms(fp50), float64(tp50)/float64(fp50), ms(np50), float64(tp50)/float64(np50), len(ks))
		})
	}
}

// emptyGoProgram builds a static Go program whose main does nothing, as kuruwa is built: its
// exec is the floor under any CLI call written in Go (the runtime's start and exit), measured
// alongside each verb so the bench prints how far below tmux a Go client can get at all.
func emptyGoProgram(b *testing.B, dir string) string {
	src := filepath.Join(dir, "empty")
	if err := os.MkdirAll(src, 0o755); err != nil {
		b.Fatal(err)
	}
	for name, text := range map[string]string{"go.mod": "module empty\n", "main.go": "package main\n\nfunc main() {}\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "empty-go")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir, build.Env = src, append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the empty Go program: %v\n%s", err, out)
	}
	return bin
}

// pop takes the last name made by create, making one first (untimed, through kw) if none is left.
func pop(names *[]string, kw func(...string) error) string {
	if len(*names) == 0 {
		if kw == nil {
			panic("BUG: terminate ran before create")
		}
		n := fmt.Sprintf("extra%d", time.Now().UnixNano())
		if err := kw("start", n, "--instance", "host", "--", "cat"); err != nil {
			panic(err)
		}
		return n
	}
	n := (*names)[len(*names)-1]
	*names = (*names)[:len(*names)-1]
	return n
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.50), at(0.99)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
