package scope

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		domains []string
		err     string // part of the error; "" = valid
	}{
		{in: `{}`, domains: []string{Workspace, Shared}},
		{in: `{"paths":["/etc"],"sysctl":"all","bpf":true,"mounts":true,"network":true,"modules":true,"processes":true}`,
			domains: []string{Workspace, Shared, Paths, Sysctl, BPF, Mounts, Network, Netfilter, Modules, Processes}},
		{in: `{"sysctl":["net.","kernel.hostname"]}`, domains: []string{Workspace, Shared, Sysctl}},
		{in: `{"bpff":true}`, err: `unknown field "bpff"`},
		{in: `{"sysctl":"some"}`, err: `use "all" or a list`},
		{in: `{"sysctl":["net/ipv4"]}`, err: "dotted names"},
		{in: `{"paths":["etc"]}`, err: "clean absolute path"},
		{in: `{"paths":["/proc/sys"]}`, err: "sysctl, mounts or modules"},
		{in: `{"paths":["/etc","/etc/ssh"]}`, err: `"/etc/ssh" is inside "/etc"`},
		{in: `{} {}`, err: "trailing data"},
	} {
		s, err := Parse(strings.NewReader(tc.in))
		if tc.err != "" {
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%s) = %v, want ErrInvalid containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%s): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.domains, s.Domains()); diff != "" {
			t.Errorf("Parse(%s) domains (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestKeysMatch(t *testing.T) {
	k := &Keys{Prefixes: []string{"net.", "kernel.hostname", "vm.overcommit_memory"}}
	for key, want := range map[string]bool{
		"net.ipv4.ip_forward": true, "kernel.hostname": true, "kernel.hostnamex": false,
		"vm.overcommit_memory": true, "vm.swappiness": false, "network": false,
	} {
		if got := k.Match(key); got != want {
			t.Errorf("Match(%q) = %t, want %t", key, got, want)
		}
	}
	if !(&Keys{All: true}).Match("anything") || (*Keys)(nil).Match("net.x") {
		t.Error("all must match everything and a nil selection nothing")
	}
}

func TestOverlap(t *testing.T) {
	s := &Scope{Paths: []string{"/var/lib"}}
	if err := s.Overlap("/var/lib/allox/agents/a/workspace/sessions/s/current", "/srv/shared"); !errors.Is(err, ErrInvalid) {
		t.Errorf("a scope path containing the workspace: %v, want ErrInvalid", err)
	}
	if err := s.Overlap("/srv/current", "/srv/shared"); err != nil {
		t.Errorf("disjoint paths: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"paths":["/etc"],"sysctl":["net."],"bpf":true}`)
	f.Add(`{"sysctl":"all"}`)
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, p := range s.Paths {
			if !strings.HasPrefix(p, "/") {
				t.Fatalf("accepted relative path %q", p)
			}
		}
	})
}
