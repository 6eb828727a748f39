package manifest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sample() *Manifest {
	return &Manifest{
		Version:  Version,
		Image:    Image{Name: "allox", Version: "0.1.0"},
		Hostname: "allox",
		Store:    Store{Serial: "allox-ws", Mountpoint: "/var/lib/allox/workspaces", Label: "allox-ws", FallbackSizeMiB: 512},
		Network:  &Network{Interface: "eth0", Address: "10.0.2.15/24", Gateway: "10.0.2.2"},
		FwCfg:    []FwCfg{{Name: "opt/allox/rpc-token", Path: "/run/allox/rpc-token", Mode: 0o600}},
		Services: []Service{
			{Name: "web", Command: []string{"/bin/web"}, After: []string{"db"}, Restart: RestartAlways, Ready: &Ready{TCP: "127.0.0.1:80"}},
			{Name: "db", Command: []string{"/bin/db"}, Env: map[string]string{"B": "2", "A": "1"}, Restart: RestartOnFailure},
			{Name: "cron", Command: []string{"/bin/cron"}, Restart: RestartNever},
		},
		KataAgent: &KataAgent{Path: "/usr/bin/kata-agent", MaxRestarts: 3},
	}
}

func TestRoundTrip(t *testing.T) {
	var a, b bytes.Buffer
	if err := Encode(&a, sample()); err != nil {
		t.Fatal(err)
	}
	got, err := Decode(bytes.NewReader(a.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(sample(), got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	if err := Encode(&b, got); err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("encoding is not stable: %v", err)
	}
}

func TestStartOrder(t *testing.T) {
	order, err := sample().StartOrder()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range order {
		names = append(names, s.Name)
	}
	if d := cmp.Diff([]string{"db", "web", "cron"}, names); d != "" {
		t.Errorf("start order (-want +got):\n%s", d)
	}
}

func TestDecodeRejects(t *testing.T) {
	var good bytes.Buffer
	if err := Encode(&good, sample()); err != nil {
		t.Fatal(err)
	}
	text := good.String()
	tests := map[string]struct{ in, want string }{
		"unknown field": {strings.Replace(text, `"hostname"`, `"hostnme"`, 1), `unknown field "hostnme"`},
		"other version": {strings.Replace(text, `"version": 1`, `"version": 2`, 1), "manifest version 2: this init reads version 1"},
		"trailing data": {text + "{}", "trailing data"},
		"bad restart":   {strings.Replace(text, `"never"`, `"sometimes"`, 1), `service "cron": restart "sometimes" is not one of`},
		"unknown after": {strings.Replace(text, `"db"
      ]`, `"dbx"
      ]`, 1), `service "web": after names unknown service "dbx"`},
		"cycle":           {strings.Replace(text, `"name": "db",`, `"name": "db", "after": ["web"],`, 1), "dependency cycle"},
		"duplicate name":  {strings.Replace(text, `"name": "cron"`, `"name": "db"`, 1), `"db" is used twice`},
		"two ready kinds": {strings.Replace(text, `"tcp": "127.0.0.1:80"`, `"tcp": "127.0.0.1:80", "path": "/x"`, 1), "exactly one of tcp or path"},
		"not json":        {"version: 1", "decode manifest"},
		"relative agent":  {strings.Replace(text, `"path": "/usr/bin/kata-agent"`, `"path": "kata-agent"`, 1), `kata_agent.path "kata-agent" is not absolute`},
		"negative budget": {strings.Replace(text, `"max_restarts": 3`, `"max_restarts": -1`, 1), "kata_agent.max_restarts -1 is negative"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.in == text {
				t.Fatal("the test's replacement did not apply")
			}
			_, err := Decode(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	var good bytes.Buffer
	if err := Encode(&good, sample()); err != nil {
		f.Fatal(err)
	}
	f.Add(good.String())
	f.Add(`{"version":1,"store":{"mountpoint":"/w"},"services":[]}`)
	f.Fuzz(func(t *testing.T, in string) {
		m, err := Decode(strings.NewReader(in))
		if err != nil {
			return
		}
		// Whatever decodes must encode, decode again to the same value, and have a start order.
		var buf bytes.Buffer
		if err := Encode(&buf, m); err != nil {
			t.Fatalf("decoded manifest does not encode: %v", err)
		}
		again, err := Decode(&buf)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if d := cmp.Diff(m, again); d != "" {
			t.Fatalf("round trip changed the manifest:\n%s", d)
		}
		if _, err := m.StartOrder(); err != nil {
			t.Fatalf("validated manifest has no start order: %v", err)
		}
	})
}
