package gateway

import (
	"crypto/tls"
	"errors"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/pki"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

type clientv3Cmp = clientv3.Cmp

func withPrefix() clientv3.OpOption { return clientv3.WithPrefix() }
func itoa(n int64) string           { return strconv.FormatInt(n, 10) }

func refusedWith(t *testing.T, err error, status int) {
	t.Helper()
	var ref *wire.ErrRefused
	if !errors.As(err, &ref) || ref.Status != status {
		t.Errorf("got %v, want refused with HTTP %d", err, status)
	}
}

// Attack: a Probe's certificate used on the operator API (apply a spec, run an op) is refused.
func TestAttackProbeCertOnAdminAPI(t *testing.T) {
	c := newCluster(t, 1)
	tc := c.tls("host-a", wire.RoleProbe)
	a, _ := wire.NewAdminClient(c.urls, tc)
	refusedWith(t, a.Do(t.Context(), http.MethodPost, wire.PathApply, wire.Apply{DevBoxes: []spec.DevBox{{Name: "x"}}}, nil), 403)
	refusedWith(t, a.Do(t.Context(), http.MethodPost, wire.PathOps, wire.Op{DevBox: "x", Kind: wire.IntentCheckpoint}, nil), 403)
	refusedWith(t, a.Do(t.Context(), http.MethodGet, wire.PathAudit, nil, nil), 403)
	if resp, _ := c.cli.Get(t.Context(), prefixDevBox, clientv3.WithPrefix()); len(resp.Kvs) != 0 {
		t.Errorf("a probe certificate wrote a spec: %s", resp.Kvs[0].Key)
	}
}

// Attack: a Probe registers, renews or reports for a host its certificate does not name.
func TestAttackProbeSpeaksForAnotherHost(t *testing.T) {
	c := newCluster(t, 1)
	victim := c.probe("host-b")
	g := register(t, victim, 1)
	evil, _ := wire.NewProbeClient("host-b", c.urls, c.tls("host-a", wire.RoleProbe))
	_, err := evil.Register(t.Context(), wire.Register{Host: "host-b", Capacity: wire.Capacity{Slots: 9}})
	refusedWith(t, err, 403)
	_, err = evil.Heartbeat(t.Context(), wire.Heartbeat{Host: "host-b", Epoch: g.Epoch})
	refusedWith(t, err, 403)
	_, err = evil.Pull(t.Context(), g.Epoch, 0, 0)
	refusedWith(t, err, 403)
	refusedWith(t, evil.Report(t.Context(), g.Epoch, nil), 403)
	if _, err := victim.Heartbeat(t.Context(), wire.Heartbeat{Host: "host-b", Epoch: g.Epoch}); err != nil {
		t.Errorf("the victim's lease was disturbed: %v", err)
	}
}

// Attack: an operator certificate cannot pose as a Probe (and so cannot take a host's lease).
func TestAttackAdminCertOnProbeAPI(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := wire.NewProbeClient("ops", c.urls, c.tls("ops", wire.RoleAdmin))
	_, err := p.Register(t.Context(), wire.Register{Host: "ops"})
	refusedWith(t, err, 403)
}

// Attack: a certificate from another CA, and no certificate at all, do not get past TLS.
func TestAttackForeignCAAndNoCert(t *testing.T) {
	c := newCluster(t, 1)
	other, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	other.Save(dir)
	other.IssueFiles(dir, "host-a", "host-a", wire.RoleProbe)
	tc, err := pki.ClientConfig(filepath.Join(c.dir, pki.CAFile), filepath.Join(dir, "host-a.pem"), filepath.Join(dir, "host-a-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := wire.NewProbeClient("host-a", c.urls, tc)
	if _, err := p.Register(t.Context(), wire.Register{Host: "host-a"}); err == nil {
		t.Error("a certificate of a foreign CA registered a host")
	}
	pool, _ := pki.Pool(filepath.Join(c.dir, pki.CAFile))
	np, _ := wire.NewProbeClient("host-a", c.urls, &tls.Config{RootCAs: pool})
	if _, err := np.Register(t.Context(), wire.Register{Host: "host-a"}); err == nil {
		t.Error("a client without a certificate registered a host")
	}
}

// Attack: a Probe reports a phase for a DevBox that is not placed on it.
func TestAttackObserveForeignDevBox(t *testing.T) {
	c := newCluster(t, 1)
	c.lead(0)
	a := c.admin()
	pa, pb := c.probe("host-a"), c.probe("host-b")
	ga := register(t, pa, 1)
	keepAlive(t, pa, ga)
	apply(t, a, spec.DevBox{Name: "alpha"})
	c.eventually("placed on host-a", func() bool { return get(t, a, "alpha").Placement != nil })
	gb := register(t, pb, 0)
	err := pb.Report(t.Context(), gb.Epoch, []wire.Event{{Kind: wire.EventPhase, Epoch: gb.Epoch, DevBox: "alpha", Phase: wire.PhaseStopped}})
	refusedWith(t, err, 403)
	if o := get(t, a, "alpha").Observed; o != nil {
		t.Errorf("host-b wrote alpha's observed state: %+v", o)
	}
	err = pb.Report(t.Context(), gb.Epoch, []wire.Event{{Kind: wire.EventPhase, Epoch: gb.Epoch - 1, DevBox: "alpha"}})
	refusedWith(t, err, 400)
}

// The Probe's client has exactly the four calls of the data plane: no spec, placement, policy or
// approval call exists for it to make.
func TestProbeClientHasNoControlPlaneCalls(t *testing.T) {
	var got []string
	typ := reflect.TypeFor[*wire.ProbeClient]()
	for m := range typ.Methods() {
		got = append(got, m.Name)
	}
	slices.Sort(got)
	if want := []string{"Heartbeat", "Pull", "Register", "Report"}; !slices.Equal(got, want) {
		t.Errorf("ProbeClient methods = %v, want exactly %v", got, want)
	}
}
