package daemon_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

func fdCount(t *testing.T, pid string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func rssKiB(t *testing.T, pid string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// 50 start/send/screen/clean cycles leave the main daemon (this process) and the instance
// daemon with at most 8 more descriptors and 32 MiB more resident memory than after the first.
func TestFiftyCyclesDoNotLeak(t *testing.T) {
	f := newDaemon(t, boxConfig)
	inst := strconv.Itoa(hostInstance(t, f).PID)
	cycle := func(i int) {
		name := fmt.Sprintf("c%d", i)
		f.must(f.mgmt(), "start", name, "--instance", "host", "--", "sh")
		f.must(f.mgmt(), "send", name, "echo cycle-"+name, "--key", "Enter", "--settle", "0")
		f.waitScreen(f.mgmt(), name, "cycle-"+name)
		f.must(f.mgmt(), "tail", name)
		f.must(f.mgmt(), "clean", name, "--force")
	}
	cycle(-1)
	fds0, ifds0 := fdCount(t, "self"), fdCount(t, inst)
	rss0, irss0 := rssKiB(t, "self"), rssKiB(t, inst)
	for i := range 50 {
		cycle(i)
	}
	fds1, ifds1 := fdCount(t, "self"), fdCount(t, inst)
	rss1, irss1 := rssKiB(t, "self"), rssKiB(t, inst)
	t.Logf("main daemon fds %d→%d rss %d→%d KiB; instance daemon fds %d→%d rss %d→%d KiB", fds0, fds1, rss0, rss1, ifds0, ifds1, irss0, irss1)
	if fds1-fds0 > 8 || ifds1-ifds0 > 8 {
		t.Errorf("descriptor drift: main %d, instance %d (max 8)", fds1-fds0, ifds1-ifds0)
	}
	if rss1-rss0 > 32<<10 || irss1-irss0 > 32<<10 {
		t.Errorf("RSS drift: main %d KiB, instance %d KiB (max 32 MiB)", rss1-rss0, irss1-irss0)
	}
}

// 16 clients at once each run their own terminal through start, send, screen and clean, while
// 16 more race for a single name: every client succeeds and exactly one takes the name.
func TestSixteenConcurrentClients(t *testing.T) {
	f := newDaemon(t, boxConfig)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	var winners sync.Map
	for i := range 16 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("p%d", i)
			steps := [][]string{
				{"start", name, "--instance", "host", "--", "sh"},
				{"send", name, "echo hi-" + name, "--key", "Enter", "--settle", "0"},
				{"screen", name},
				{"status", name},
				{"clean", name, "--force"},
			}
			for _, s := range steps {
				if _, err := f.kw(f.mgmt(), s...); err != nil {
					errs <- fmt.Errorf("%v: %w", s, err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := f.kw(f.mgmt(), "start", "shared", "--instance", "host", "--", "sleep", "30"); err == nil {
				winners.Store(i, true)
			} else if !strings.Contains(err.Error(), "conflict") {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := 0
	winners.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d clients took the name \"shared\", want exactly 1", n)
	}
}

// A client that opens tail -f and never reads must not hold up the terminal: the program's
// output keeps flowing into the screen and the program finishes.
func TestStalledReaderNeverBlocksTheTerminal(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "flood", "--instance", "host", "--", "sh", "-c", "sleep 0.3; head -c 1200000 /dev/zero | tr '\\0' x; echo; echo flood-done")
	stalled := f.dial(f.mgmt())
	openStream(t, stalled, "tail", "flood") // and never read from it again
	f.waitExit(f.mgmt(), "flood")
	f.waitScreen(f.mgmt(), "flood", "flood-done")
}

// Every connection is recorded with the peer credentials the kernel gave (SO_PEERCRED).
func TestConnectionsRecordPeerCredentials(t *testing.T) {
	f := newDaemon(t, boxConfig)
	c := f.dial(f.entry("agent"))
	if err := c.Call("whoami", nil, nil); err != nil {
		t.Fatal(err)
	}
	var ts []wire.TenantInfo
	if err := json.Unmarshal([]byte(f.must(f.mgmt(), "tenant", "ls", "--json")), &ts); err != nil {
		t.Fatal(err)
	}
	for _, tn := range ts {
		if tn.Name != "agent" {
			continue
		}
		for _, p := range tn.Connections {
			if p.PID == int32(os.Getpid()) && p.UID == uint32(os.Geteuid()) {
				return
			}
		}
		t.Fatalf("agent's connections %+v do not include this process", tn.Connections)
	}
	t.Fatal("no tenant agent")
}

// Reading output in pieces, each resuming at the offset the last one ended at, yields exactly
// the transcript: no gap, no duplicate.
func TestTailResumeMatchesTranscript(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "count", "--instance", "host", "--", "sh", "-c", `i=0; while [ $i -lt 300 ]; do echo "n $i"; i=$((i+1)); [ $((i % 50)) = 0 ] && sleep 0.05; done`)
	var got []byte
	var from uint64
	for done := false; !done; {
		conn := f.dial(f.mgmt())
		if err := conn.Call("tail", wire.TailArgs{Name: "count", From: from}, nil); err != nil {
			t.Fatal(err)
		}
		for {
			var fr wire.Frame
			if err := conn.Recv(&fr); err != nil {
				t.Fatal(err)
			}
			if fr.Error != nil {
				t.Fatal(fr.Error)
			}
			if len(fr.Output) > 0 && fr.Seq != from {
				t.Fatalf("frame at offset %d, expected %d", fr.Seq, from)
			}
			got = append(got, fr.Output...)
			from += uint64(len(fr.Output))
			if fr.End {
				done = fr.Exit != nil
				break
			}
		}
		conn.Close()
		time.Sleep(5 * time.Millisecond)
	}
	want := f.must(f.mgmt(), "transcript", "count")
	if string(got) != want || !strings.Contains(want, "n 299") {
		t.Fatalf("resumed tail (%d bytes) differs from the transcript (%d bytes)", len(got), len(want))
	}
}
