package daemon_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// Each test below is one attack by a restricted tenant; it fails if the attack works.

func TestRestrictedTenantCannotCreateTenants(t *testing.T) {
	f := newDaemon(t, boxConfig)
	_, err := f.kw(f.entry("agent"), "tenant", "add", "sub")
	wantCode(t, err, wire.CodeForbidden)
	if out := f.must(f.mgmt(), "tenant", "ls"); strings.Contains(out, "sub") {
		t.Fatalf("a tenant was created:\n%s", out)
	}
}

func TestRestrictedTenantCannotDelegate(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.entry("agent"), "instance", "start", "plain", "--name", "p")
	for _, args := range [][]string{
		{"grant", "other", "--instance", "p"},
		{"grant", "other", "--definition", "plain"},
		{"revoke", "agent", "--definition", "plain"},
	} {
		_, err := f.kw(f.entry("agent"), args...)
		wantCode(t, err, wire.CodeForbidden)
	}
	_, err := f.kw(f.entry("other"), "start", "x", "--instance", "p", "--", "true")
	wantCode(t, err, wire.CodeNotFound)
}

func TestRestrictedTenantCannotUseUngrantedDefinition(t *testing.T) {
	f := newDaemon(t, boxConfig)
	_, err := f.kw(f.entry("other"), "instance", "start", "plain")
	wantCode(t, err, wire.CodeForbidden)
	_, err = f.kw(f.entry("agent"), "instance", "start", "host")
	wantCode(t, err, wire.CodeForbidden)
}

func TestRestrictedTenantCannotReachTheHostInstance(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "hostsh", "--instance", "host", "--", "sleep", "30")
	_, err := f.kw(f.entry("agent"), "start", "x", "--instance", "host", "--", "true")
	wantCode(t, err, wire.CodeNotFound)
	for _, verb := range []string{"screen", "status", "tail", "transcript", "cancel", "clean", "attach"} {
		_, err := f.kw(f.entry("agent"), verb, "hostsh")
		wantCode(t, err, wire.CodeNotFound)
	}
	_, err = f.kw(f.entry("agent"), "send", "hostsh", "rm -rf ~", "--key", "Enter")
	wantCode(t, err, wire.CodeNotFound)
	if out := f.must(f.entry("agent"), "ls", "--json"); strings.Contains(out, "hostsh") || strings.Contains(out, `"host"`) {
		t.Fatalf("ls shows the host's objects to a restricted tenant:\n%s", out)
	}
}

// A terminal grant gives read, input and resize on that terminal and nothing else: not its
// siblings, not cancel or clean, not new terminals in its instance, not attach.
func TestTerminalGrantAllowsOnlyAccess(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "given", "--instance", "host", "--", "sh")
	f.must(f.mgmt(), "start", "sibling", "--instance", "host", "--", "sleep", "30")
	f.must(f.mgmt(), "grant", "other", "--terminal", "given")
	o := f.entry("other")
	f.must(o, "send", "given", "echo granted-$((6*7))", "--key", "Enter", "--settle", "0")
	f.waitScreen(o, "given", "granted-42")
	f.must(o, "resize", "given", "100x30")
	if out := f.must(o, "screen", "given"); !strings.Contains(out, "size=100x30") {
		t.Fatalf("resize did not apply:\n%s", out)
	}
	f.must(o, "tail", "given")
	f.must(o, "transcript", "given")
	f.must(o, "status", "given")
	for _, verb := range []string{"cancel", "clean", "attach"} {
		_, err := f.kw(o, verb, "given")
		wantCode(t, err, wire.CodeForbidden)
	}
	_, err := f.kw(o, "clean", "--instance", "host", "--force")
	wantCode(t, err, wire.CodeForbidden)
	_, err = f.kw(o, "start", "more", "--instance", "host", "--", "true")
	wantCode(t, err, wire.CodeNotFound)
	_, err = f.kw(o, "screen", "sibling")
	wantCode(t, err, wire.CodeNotFound)
	if out := f.must(o, "gc"); out != "" {
		t.Fatalf("gc by a terminal-access tenant removed %q", out)
	}
	if st := f.must(f.mgmt(), "status", "given"); !strings.Contains(st, "running") {
		t.Fatalf("terminal was affected: %s", st)
	}
}

// A tenant that created an instance manages it; another tenant with control of it may create
// terminals but not destroy it.
func TestInstanceControlIsNotInstanceManagement(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.entry("agent"), "instance", "start", "plain", "--name", "p")
	f.must(f.mgmt(), "grant", "other", "--instance", "p")
	f.must(f.entry("other"), "start", "o1", "--instance", "p", "--", "sleep", "30")
	f.must(f.entry("other"), "cancel", "o1")
	_, err := f.kw(f.entry("other"), "clean", "--instance", "p", "--force")
	wantCode(t, err, wire.CodeForbidden)
	_, err = f.kw(f.entry("other"), "attach", "o1")
	wantCode(t, err, wire.CodeForbidden)
	f.waitExit(f.entry("other"), "o1")
	_, err = f.kw(f.entry("agent"), "clean", "--instance", "p")
	wantCode(t, err, wire.CodeConflict)
	f.must(f.entry("agent"), "clean", "--instance", "p", "--force")
	if out := f.must(f.mgmt(), "ls", "--instances"); strings.Contains(out, "p\t") {
		t.Fatalf("instance survived a forced clean:\n%s", out)
	}
}

func TestRevokedGrantRefusesLaterRequests(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "g", "--instance", "host", "--", "sh")
	f.must(f.mgmt(), "grant", "other", "--terminal", "g")
	conn := f.dial(f.entry("other"))
	if err := conn.Call("screen", wire.ScreenArgs{Name: "g"}, nil); err != nil {
		t.Fatal(err)
	}
	f.must(f.mgmt(), "revoke", "other", "--terminal", "g")
	// The connection that relied on the grant is closed; a new one is refused.
	if err := conn.Call("screen", wire.ScreenArgs{Name: "g"}, nil); err == nil {
		t.Fatal("the connection that used the revoked grant still answers")
	}
	_, err := f.kw(f.entry("other"), "send", "g", "echo after-revoke", "--key", "Enter")
	wantCode(t, err, wire.CodeNotFound)
	if out := f.must(f.mgmt(), "status", "g"); !strings.Contains(out, "running") {
		t.Fatalf("revocation ended the terminal: %s", out)
	}
}

// openStream starts op (tail -f or attach) on conn and returns once the stream is live.
func openStream(t *testing.T, conn *wire.Conn, op, name string) {
	t.Helper()
	if err := conn.Call(op, wire.TailArgs{Name: name, Follow: true}, nil); err != nil {
		t.Fatalf("%s %s: %v", op, name, err)
	}
}

// droppedWithin reads conn until it ends; it fails if the stream is still delivering output
// after d (the terminal prints continuously, so a live stream always has output).
func droppedWithin(t *testing.T, conn *wire.Conn, d time.Duration) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(d))
	for {
		var f wire.Frame
		err := conn.Recv(&f)
		if err != nil {
			if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
				t.Fatalf("stream still open %v after the revocation", d)
			}
			return
		}
		if f.Error != nil {
			if f.Error.Code != wire.CodeRevoked {
				t.Fatalf("stream ended with %v, want revoked", f.Error)
			}
			continue
		}
	}
}

const chatter = `while :; do echo tick; sleep 0.01; done`

func TestRevokeDropsLiveTailWithin100ms(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "busy", "--instance", "host", "--", "sh", "-c", chatter)
	f.must(f.mgmt(), "grant", "other", "--terminal", "busy")
	conn := f.dial(f.entry("other"))
	openStream(t, conn, "tail", "busy")
	f.must(f.mgmt(), "revoke", "other", "--terminal", "busy")
	droppedWithin(t, conn, 100*time.Millisecond)
}

func TestRevokeDropsLiveAttachWithin100ms(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.entry("agent"), "instance", "start", "plain", "--name", "p")
	f.must(f.entry("agent"), "start", "busy", "--instance", "p", "--", "sh", "-c", chatter)
	conn := f.dial(f.entry("agent"))
	openStream(t, conn, "attach", "busy")
	f.must(f.mgmt(), "revoke", "agent", "--definition", "plain")
	droppedWithin(t, conn, 100*time.Millisecond)
	_, err := f.kw(f.entry("agent"), "screen", "busy")
	wantCode(t, err, wire.CodeNotFound)
}

// The owner's attach rests on instance control, so revoking a terminal grant leaves it alone.
func TestTerminalRevokeLeavesOwnerAttach(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.entry("agent"), "instance", "start", "plain", "--name", "p")
	f.must(f.entry("agent"), "start", "busy", "--instance", "p", "--", "sh", "-c", chatter)
	f.must(f.mgmt(), "grant", "other", "--terminal", "busy")
	f.must(f.mgmt(), "grant", "agent", "--terminal", "busy")
	conn := f.dial(f.entry("agent"))
	openStream(t, conn, "attach", "busy")
	f.must(f.mgmt(), "revoke", "agent", "--terminal", "busy")
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var got int
	for got < 3 {
		var fr wire.Frame
		if err := conn.Recv(&fr); err != nil {
			t.Fatalf("owner attach dropped by a terminal revocation: %v", err)
		}
		if len(fr.Output) > 0 {
			got++
		}
	}
}

// A revoke followed at once by a re-grant must still have closed the stream that relied on the
// first grant: the re-grant cannot slip in between the change and the closing.
func TestRevokeRacingRegrantStillDrops(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "busy", "--instance", "host", "--", "sh", "-c", chatter)
	f.must(f.mgmt(), "grant", "other", "--terminal", "busy")
	for i := range 20 {
		conn := f.dial(f.entry("other"))
		openStream(t, conn, "tail", "busy")
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.must(f.mgmt(), "grant", "other", "--terminal", "busy") // idempotent; races the revoke
		}()
		f.must(f.mgmt(), "revoke", "other", "--terminal", "busy")
		<-done
		droppedWithin(t, conn, 100*time.Millisecond)
		if _, err := f.kw(f.mgmt(), "grant", "other", "--terminal", "busy"); err != nil {
			t.Fatalf("round %d: re-grant: %v", i, err)
		}
		f.must(f.entry("other"), "screen", "busy")
	}
}

func TestRemovedTenantLosesItsEntryAndConnections(t *testing.T) {
	f := newDaemon(t, boxConfig)
	out := f.must(f.mgmt(), "tenant", "add", "temp")
	path := strings.TrimSpace(strings.Split(out, "\t")[1])
	f.must(f.mgmt(), "start", "busy", "--instance", "host", "--", "sh", "-c", chatter)
	f.must(f.mgmt(), "grant", "temp", "--terminal", "busy")
	conn := f.dial(path)
	openStream(t, conn, "tail", "busy")
	f.must(f.mgmt(), "tenant", "rm", "temp")
	droppedWithin(t, conn, 100*time.Millisecond)
	if _, err := f.kw(path, "ls"); err == nil {
		t.Fatal("the removed tenant's entry still answers")
	}
	_, err := f.kw(f.mgmt(), "tenant", "rm", "agent")
	wantCode(t, err, wire.CodeForbidden)
}

// An instance named like an instance id would take the place of the instance that gets that id
// next, in every lookup by the host (grant --instance, clean --instance): the name is refused,
// and nothing is created.
func TestInstanceNameShapedLikeAnIDIsRefused(t *testing.T) {
	f := newDaemon(t, boxConfig)
	before := f.must(f.mgmt(), "ls", "--instances")
	trap := fmt.Sprintf("i%d-3", f.d.Generation())
	_, err := f.kw(f.entry("agent"), "instance", "start", "plain", "--name", trap)
	wantCode(t, err, wire.CodeBadRequest)
	var we *wire.Error
	if !errors.As(err, &we) || we.Field != "name" || !strings.Contains(we.Message, "instance id") {
		t.Fatalf("the refusal does not name the field and say why: %v", err)
	}
	if after := f.must(f.mgmt(), "ls", "--instances"); after != before {
		t.Fatalf("a refused instance start changed the instances:\n%s\nwas:\n%s", after, before)
	}
}

// A tenant that walks instance ids learns no instance's name: the refusal repeats its own
// reference.
func TestInstanceIDRevealsNoName(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "instance", "start", "plain", "--name", "secret")
	var ls wire.LsResult
	if err := json.Unmarshal([]byte(f.must(f.mgmt(), "ls", "--instances", "--json")), &ls); err != nil {
		t.Fatal(err)
	}
	for _, in := range ls.Instances {
		for _, args := range [][]string{
			{"start", "x", "--instance", in.ID, "--", "true"},
			{"clean", "--instance", in.ID, "--force"},
		} {
			_, err := f.kw(f.entry("agent"), args...)
			wantCode(t, err, wire.CodeNotFound)
			if strings.Contains(err.Error(), in.Name) || !strings.Contains(err.Error(), in.ID) {
				t.Errorf("kuruwa %v: %v, want the id %s and not the name %s", args, err, in.ID, in.Name)
			}
		}
	}
	if after := f.must(f.mgmt(), "ls", "--instances"); !strings.Contains(after, "secret\t") || len(ls.Instances) != 2 {
		t.Fatalf("refused requests changed the instances:\n%s", after)
	}
}

// A tenant removed and added again is a new tenant: its predecessor's instances, and the
// terminals in them, stay the host's to manage.
func TestReaddedTenantGetsNoneOfTheRemovedTenantsInstances(t *testing.T) {
	f := newDaemon(t, boxConfig)
	add := func() string {
		out := f.must(f.mgmt(), "tenant", "add", "temp")
		f.must(f.mgmt(), "grant", "temp", "--definition", "plain")
		return strings.TrimSpace(strings.Split(out, "\t")[1])
	}
	path := add()
	f.must(path, "instance", "start", "plain", "--name", "w")
	f.must(path, "start", "job", "--instance", "w", "--", "sleep", "30")
	f.must(f.mgmt(), "tenant", "rm", "temp")
	path = add()
	for _, args := range [][]string{{"screen", "job"}, {"send", "job", "x"}, {"clean", "job"}, {"clean", "--instance", "w", "--force"},
		{"start", "y", "--instance", "w", "--", "true"}} {
		_, err := f.kw(path, args...)
		wantCode(t, err, wire.CodeNotFound)
	}
	if out := f.must(path, "ls", "--instances"); strings.Contains(out, "w\t") || strings.Contains(out, "job") {
		t.Fatalf("the new tenant temp sees its predecessor's objects:\n%s", out)
	}
	if st := f.status("job"); !st.Running {
		t.Fatalf("job: %+v", st)
	}
	f.must(f.mgmt(), "clean", "--instance", "w", "--force")
}

// A send that settles before its Enter, revoked during the delay, types nothing more: the
// command it pasted never runs, the revoke returns without waiting for the delay, and the
// terminal lives on.
func TestRevokeDuringSettleStopsTheKeysStillToCome(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "g", "--instance", "host", "--", "sh")
	f.must(f.mgmt(), "grant", "other", "--terminal", "g")
	conn := f.dial(f.entry("other"))
	sent := make(chan error, 1)
	go func() {
		sent <- conn.Call("send", wire.SendArgs{Name: "g", Text: "echo ran-$((6*7))", Keys: []string{"Enter"}, SettleMS: 1500}, nil)
	}()
	f.waitScreen(f.mgmt(), "g", "echo ran-$((6*7))") // the text is typed; Enter is 1.5 s away
	start := time.Now()
	f.must(f.mgmt(), "revoke", "other", "--terminal", "g")
	if took := time.Since(start); took > time.Second {
		t.Errorf("revoke took %v: it waited for the settle delay", took)
	}
	if err := <-sent; err == nil {
		t.Error("the revoked send reported success")
	}
	time.Sleep(2500 * time.Millisecond) // well past the settle: Enter would have come by now
	if out := f.must(f.mgmt(), "screen", "g", "--plain"); strings.Contains(out, "ran-42") {
		t.Fatalf("the command typed by the revoked tenant ran after the revoke returned:\n%s", out)
	}
	if out := f.must(f.mgmt(), "status", "g"); !strings.Contains(out, "running") {
		t.Fatalf("revocation ended the terminal: %s", out)
	}
}
