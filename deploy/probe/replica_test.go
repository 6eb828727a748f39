package probe

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/audit"
	"github.com/allox-os/allox/deploy/probe/internal/gateway"
	"github.com/allox-os/allox/deploy/probe/internal/pki"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// heartbeat keeps host's lease alive through the Gateway replicas at urls (a simulated Probe:
// this test is about the Gateway's writes, not about what a Probe does with its intents).
func (f *fleet) heartbeat(host string, urls []string, slots int) {
	if err := f.ca.IssueFiles(f.pki, host, host, wire.RoleProbe); err != nil {
		f.t.Fatal(err)
	}
	tc := f.tlsOf(host)
	p, err := wire.NewProbeClient(host, urls, tc)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		var epoch int64
		for ctx.Err() == nil {
			if epoch == 0 {
				g, err := p.Register(ctx, wire.Register{Host: host, Capacity: wire.Capacity{Slots: slots}})
				if err == nil {
					epoch = g.Epoch
				}
			} else if _, err := p.Heartbeat(ctx, wire.Heartbeat{Host: host, Epoch: epoch, Capacity: wire.Capacity{Slots: slots}, Healthy: true}); err != nil && strings.Contains(err.Error(), "lease_lost") {
				epoch = 0
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}

// A Gateway replica killed while it places a batch of DevBoxes: the other replica takes over and
// finishes, and no DevBox is ever placed twice (one placement, one boot intent, one "place"
// audit record each).
func TestChaosGatewayReplicaKilledMidWrite(t *testing.T) {
	f := newFleet(t)
	e, err := gateway.StartEmbedded(t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	cli, err := gateway.Connect([]string{e.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	url1, _, p1 := f.gateway("r1", e.Endpoint)
	url2, _, p2 := f.gateway("r2", e.Endpoint)
	leaderName := func() string {
		resp, err := cli.Get(t.Context(), "/allox/leader", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
		if err != nil || len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	eventually(t, "a replica leads", func() bool { return leaderName() != "" })
	leader, followerURL := p1, url2
	if leaderName() == "r2" {
		leader, followerURL = p2, url1
	}
	for i := range 3 {
		f.heartbeat(fmt.Sprintf("host-%d", i), []string{url1, url2}, 20)
	}
	eventually(t, "three hosts hold leases", func() bool {
		resp, _ := cli.Get(t.Context(), "/allox/host/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		return resp != nil && len(resp.Kvs) == 6
	})
	const n = 40
	var boxes []spec.DevBox
	for i := range n {
		d := spec.DevBox{Name: fmt.Sprintf("box-%02d", i), Runtime: spec.RuntimeProcess}
		spec.Check(&d)
		boxes = append(boxes, d)
	}
	a := f.admin(followerURL)
	if err := a.Do(t.Context(), http.MethodPost, wire.PathApply, wire.Apply{DevBoxes: boxes}, nil); err != nil {
		t.Fatal(err)
	}
	// Kill the leader as soon as it has placed some, but not all.
	eventually(t, "the leader starts placing", func() bool {
		resp, _ := cli.Get(t.Context(), "/allox/placement/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return resp != nil && resp.Count > 0
	})
	leader.kill()
	resp, _ := cli.Get(t.Context(), "/allox/placement/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	t.Logf("leader killed with %d of %d placed", resp.Count, n)

	eventually(t, "the other replica places every devbox", func() bool {
		resp, _ := cli.Get(t.Context(), "/allox/placement/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return resp != nil && resp.Count == n
	})
	placedOn := map[string]string{}
	ps, _ := cli.Get(t.Context(), "/allox/placement/", clientv3.WithPrefix())
	for _, kv := range ps.Kvs {
		var p wire.Placement
		json.Unmarshal(kv.Value, &p)
		placedOn[p.DevBox] = p.Host
	}
	intents := map[string][]string{}
	is, _ := cli.Get(t.Context(), "/allox/intent/", clientv3.WithPrefix())
	for _, kv := range is.Kvs {
		var in wire.Intent
		json.Unmarshal(kv.Value, &in)
		intents[in.DevBox] = append(intents[in.DevBox], in.Host)
	}
	places := map[string]int{}
	as, _ := cli.Get(t.Context(), audit.Prefix, clientv3.WithPrefix())
	for _, kv := range as.Kvs {
		var r audit.Record
		json.Unmarshal(kv.Value, &r)
		if r.Action == "place" {
			places[r.Object]++
		}
	}
	for _, d := range boxes {
		if got := intents[d.Name]; len(got) != 1 || got[0] != placedOn[d.Name] {
			t.Errorf("%s: placed on %s, boot intents on %v; want exactly one, on its host", d.Name, placedOn[d.Name], got)
		}
		if places["devbox/"+d.Name] != 1 {
			t.Errorf("%s: %d place records in the audit, want 1", d.Name, places["devbox/"+d.Name])
		}
	}
	if l := leaderName(); l == "" || (leader == p1 && l == "r1") || (leader == p2 && l == "r2") {
		t.Errorf("leader after the kill = %q, want the surviving replica", l)
	}
}

func (f *fleet) tlsOf(name string) *tls.Config {
	tc, err := pki.ClientConfig(filepath.Join(f.pki, pki.CAFile), filepath.Join(f.pki, name+".pem"), filepath.Join(f.pki, name+"-key.pem"))
	if err != nil {
		f.t.Fatal(err)
	}
	return tc
}
