package netguard

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPortSet(t *testing.T) {
	for _, tt := range []struct {
		name  string
		in    []uint16
		want  []uint16
		error string
	}{
		{name: "sorted and deduplicated", in: []uint16{8093, 22, 8093, 65535, 1}, want: []uint16{1, 22, 8093, 65535}},
		{name: "one", in: []uint16{8093}, want: []uint16{8093}},
		{name: "empty", in: nil, error: "no ports to protect"},
		{name: "port 0", in: []uint16{8093, 0}, error: "port 0 cannot be protected"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := portSet(tt.in)
			if tt.error != "" {
				if err == nil || !strings.Contains(err.Error(), tt.error) {
					t.Fatalf("portSet(%v) = %v, %v; want error containing %q", tt.in, got, err, tt.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("portSet(%v) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestBitmap(t *testing.T) {
	ports := []uint16{1, 63, 64, 8093, 65535}
	words := bitmap(ports)
	for p := range 65536 {
		set := words[p/64]>>(p%64)&1 == 1
		want := false
		for _, q := range ports {
			want = want || int(q) == p
		}
		if set != want {
			t.Errorf("port %d: bit %v, want %v", p, set, want)
		}
	}
}
