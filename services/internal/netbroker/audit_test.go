package netbroker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAuditRetention(t *testing.T) {
	dir := t.TempDir()
	l := AuditLog{Dir: dir, MaxBytes: 4096, Keep: 2}
	const n = 300
	for i := range n {
		if err := l.Append(Record{Time: time.Unix(int64(i), 0).UTC(), AgentID: "a", SessionID: "s", Host: fmt.Sprintf("h%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	for _, name := range []string{AuditFile, AuditFile + ".1", AuditFile + ".2"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 4096 {
			t.Errorf("%s is %d bytes, over MaxBytes", name, st.Size())
		}
		total += st.Size()
	}
	if _, err := os.Stat(filepath.Join(dir, AuditFile+".3")); err == nil {
		t.Error("a third rotated file is kept with Keep 2")
	}
	p, err := ReadAudit(dir, Query{Limit: MaxPage})
	if err != nil {
		t.Fatal(err)
	}
	if p.Total == n || p.Total < 20 {
		t.Fatalf("%d records kept of %d: retention did not drop the oldest, or dropped too much", p.Total, n)
	}
	// the newest are kept, in order, with nothing missing between them
	for i, r := range p.Records {
		if want := fmt.Sprintf("h%03d", n-p.Total+i); r.Host != want {
			t.Fatalf("record %d is %s, want %s", i, r.Host, want)
		}
	}
}

func TestAuditPaging(t *testing.T) {
	dir := t.TempDir()
	l := AuditLog{Dir: dir}
	for i := range 30 {
		r := Record{AgentID: []string{"a", "b"}[i%2], SessionID: []string{"s1", "s2", "s3"}[i%3], Host: fmt.Sprint(i)}
		if err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	hosts := func(p Page) string {
		var hs []string
		for _, r := range p.Records {
			hs = append(hs, r.Host)
		}
		return fmt.Sprintf("%s total=%d next=%d", strings.Join(hs, ","), p.Total, p.Next)
	}
	for _, tc := range []struct {
		q    Query
		want string
	}{
		{Query{Limit: 4}, "0,1,2,3 total=30 next=4"},
		{Query{Offset: 28}, "28,29 total=30 next=0"},
		{Query{AgentID: "a", Offset: 2, Limit: 3}, "4,6,8 total=15 next=5"},
		{Query{AgentID: "a", SessionID: "s1", Limit: 2}, "0,6 total=5 next=2"},
		{Query{AgentID: "a", SessionID: "s1", Offset: 4}, "24 total=5 next=0"},
		{Query{AgentID: "b", SessionID: "s1"}, "3,9,15,21,27 total=5 next=0"},
		{Query{AgentID: "c"}, " total=0 next=0"},
		{Query{Offset: 40}, " total=30 next=0"},
	} {
		p, err := ReadAudit(dir, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, hosts(p)); diff != "" {
			t.Errorf("%+v (-want +got):\n%s", tc.q, diff)
		}
	}
	for _, q := range []Query{{Offset: -1}, {Limit: MaxPage + 1}, {SessionID: "s1"}} {
		if _, err := ReadAudit(dir, q); err == nil {
			t.Errorf("%+v: no error", q)
		}
	}
	if p, err := ReadAudit(t.TempDir(), Query{}); err != nil || p.Total != 0 || p.Records == nil {
		t.Errorf("an empty directory: %+v %v, want an empty page", p, err)
	}
}
