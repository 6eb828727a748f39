package store

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPlanRollback(t *testing.T) {
	const old, new = 300, 301
	before := &txn{Step: stepRbSnapshot, OldID: old}
	mid := &txn{Step: stepRbExchange, OldID: old, NewID: new}
	after := &txn{Step: stepRbDeleteOld, OldID: old, NewID: new}
	for _, tc := range []struct {
		name     string
		t        *txn
		cur, tmp uint64
		want     action
		del      bool
	}{
		{"crash before snapshot", before, old, 0, rollBack, false},
		{"crash after snapshot", before, old, new, rollBack, true},
		{"crash before exchange", mid, old, new, rollBack, true},
		{"crash after exchange", mid, new, old, rollForward, true},
		{"crash before index", &txn{Step: stepRbIndex, OldID: old, NewID: new}, new, old, rollForward, true},
		{"crash before delete", after, new, old, cleanup, true},
		{"crash after delete", after, new, 0, cleanup, false},
		{"delete failed, later rollbacks", after, 777, old, cleanup, true},
		{"current missing, copy left", mid, 0, old, adoptTmp, false},
		{"nothing left", mid, 0, 0, stuck, false},
		{"current unknown", mid, 999, new, stuck, false},
		{"tmp unknown after exchange", mid, new, 999, rollForward, false},
		{"tmp unknown after commit", after, new, 999, cleanup, false},
		{"tmp unknown before exchange", mid, old, 999, rollBack, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, del := planRollback(tc.t, tc.cur, tc.tmp)
			if a != tc.want || del != tc.del {
				t.Errorf("planRollback = %v, delete tmp %v; want %v, %v", a, del, tc.want, tc.del)
			}
			if del && tc.tmp == tc.cur {
				t.Error("BUG: plan deletes current/")
			}
		})
	}
}

func TestJournalRoundTrip(t *testing.T) {
	s := &Store{stateDir: t.TempDir()}
	if _, err := loadJournal(s.stateDir); err == nil {
		t.Fatal("loadJournal without a journal dir: want error")
	}
	if err := mkdirState(s.stateDir); err != nil {
		t.Fatal(err)
	}
	a := &txn{ID: "b", Op: opRollback, Agent: "a", Session: "s", Checkpoint: "c", Step: stepRbExchange, Tmp: ".rollback-b", OldID: 1, NewID: 2}
	b := &txn{ID: "a", Op: opCheckpoint, Agent: "a", Session: "s", Checkpoint: "d", Step: stepCpIndex, Labels: map[string]string{"k": "v"}}
	for _, x := range []*txn{a, b} {
		if err := s.journalSave(x); err != nil {
			t.Fatal(err)
		}
	}
	got, err := loadJournal(s.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*txn{b, a}, got); diff != "" {
		t.Errorf("journal (-want +got):\n%s", diff)
	}
	if err := s.journalRemove(b); err != nil {
		t.Fatal(err)
	}
	if got, _ := loadJournal(s.stateDir); len(got) != 1 || got[0].ID != "b" {
		t.Errorf("after remove: %+v", got)
	}
}
