package cmdline

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// kata is the line the Kata Go runtime gives an image-mode guest, plus allox parameters.
const kata = `tsc=reliable no_timer_check rcupdate.rcu_expedited=1 i8042.direct=1 reboot=k ` +
	`console=hvc0 console=hvc1 quiet panic=1 nr_cpus=4 selinux=0 root=/dev/pmem0p1 ` +
	`rootflags=dax,data=ordered,errors=remount-ro ro rootfstype=ext4 systemd.show_status=false ` +
	`systemd.unit=kata-containers.target systemd.mask=systemd-networkd.service ` +
	`cgroup_no_v1=all agent.log=debug allox.debug=1 allox.shel=1`

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Params
	}{
		{kata, Params{Debug: true, Unknown: []string{"allox.shel"}}},
		{"quiet", Params{}},
		{"allox.debug", Params{Debug: true}},
		{"allox.debug=1 allox.debug=0", Params{}},
		{"allox.debug=yes", Params{Invalid: []string{"allox.debug=yes: want 1, 0, true or false"}}},
		{"allox.debug=0 -- allox.debug=1", Params{}},
		{"alloxdebug=1 xallox.debug=1", Params{}},
	} {
		got, err := Parse(strings.NewReader(tc.line + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Parse(%q) (-want +got):\n%s", tc.line, diff)
		}
	}
}

func TestSplit(t *testing.T) {
	for line, want := range map[string][]string{
		"":                               nil,
		"  a  b\tc\n":                    {"a", "b", "c"},
		`dyndbg="file x.c +p" quiet`:     {"dyndbg=file x.c +p", "quiet"},
		`"a b"c d`:                       {"a bc", "d"},
		`x=""`:                           {"x="},
		"a -- b c":                       {"a"},
		"a --":                           {"a"},
		`unterminated="quote goes on  `:  {"unterminated=quote goes on  "},
		"allox.debug=1 rootflags=a,b ro": {"allox.debug=1", "rootflags=a,b", "ro"},
	} {
		got, err := Split(strings.NewReader(line))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Split(%q) (-want +got):\n%s", line, diff)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(kata)
	f.Add(`a="b c" -- d`)
	f.Fuzz(func(t *testing.T, line string) {
		p, err := Parse(strings.NewReader(line))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range p.Unknown {
			if !strings.HasPrefix(u, Prefix) {
				t.Fatalf("unknown parameter %q outside %s", u, Prefix)
			}
		}
	})
}
