package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestQMPAndSCSIArgs(t *testing.T) {
	o := Options{Accel: "tcg", Kernel: "/k", QMP: "/t/q,mp.sock", SCSIController: true}
	got := strings.Join(o.withDefaults().args(nil, nil), " ")
	for _, want := range []string{
		"-qmp unix:/t/q,,mp.sock,server=on,wait=off",
		"-device virtio-scsi-pci,id=scsi0,disable-modern=false -kernel /k",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("args %q lack %q", got, want)
		}
	}
}

func TestValidateQMP(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 120)+".sock")
	for _, tc := range []struct{ path, want string }{
		{long, "a unix socket path must be shorter than 108"},
		{filepath.Join(t.TempDir(), "missing", "qmp.sock"), "its directory must exist"},
	} {
		err := Options{QMP: tc.path}.validateMachine()
		if len(err) != 1 || !errors.Is(err[0], ErrOptions) || !strings.Contains(err[0].Error(), tc.want) {
			t.Errorf("QMP %q: %v, want one error with %q", tc.path, err, tc.want)
		}
	}
	if err := (Options{QMP: filepath.Join(t.TempDir(), "qmp.sock")}).validateMachine(); len(err) != 0 {
		t.Errorf("a QMP socket in an existing directory: %v", err)
	}
}

// fakeQMP is a small QMP server: it greets, expects qmp_capabilities, then answers one command
// with an event first and then reply.
func fakeQMP(t *testing.T, reply string) (socket string, got chan map[string]any) {
	socket = filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got = make(chan map[string]any, 2)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		c.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n"))
		for _, answer := range []string{`{"return": {}}`, `{"event": "DEVICE_ADDED", "data": {}}` + "\n" + reply} {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			var req map[string]any
			json.Unmarshal(line, &req)
			got <- req
			c.Write([]byte(answer + "\n"))
		}
	}()
	return socket, got
}

func TestQMPCommand(t *testing.T) {
	socket, got := fakeQMP(t, `{"return": [{"type": "max-x86_64-cpu"}]}`)
	ctx := t.Context()
	ret, err := qmpCommand(ctx, socket, "query-hotpluggable-cpus", nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(ret) != `[{"type": "max-x86_64-cpu"}]` {
		t.Errorf("return %s", ret)
	}
	want := []map[string]any{{"execute": "qmp_capabilities"}, {"execute": "query-hotpluggable-cpus"}}
	if diff := cmp.Diff(want, []map[string]any{<-got, <-got}); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestQMPCommandError(t *testing.T) {
	socket, _ := fakeQMP(t, `{"error": {"class": "GenericError", "desc": "no slot"}}`)
	_, err := qmpCommand(t.Context(), socket, "device_add", map[string]any{"driver": "pc-dimm"})
	var qe *QMPError
	if !errors.As(err, &qe) || qe.Desc != "no slot" || err.Error() != "qmp device_add: GenericError: no slot" {
		t.Fatalf("error = %v, want QEMU's error named with the command", err)
	}
}

func TestQMPCommandNoSocket(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := qmpCommand(ctx, filepath.Join(t.TempDir(), "none.sock"), "query-status", nil)
	if err == nil || !strings.Contains(err.Error(), "qmp query-status: connect") {
		t.Fatalf("error = %v, want a connect error naming the command", err)
	}
}
