package store

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// BenchmarkSharedIndex measures what other agents' index records cost one agent when they hold
// many checkpoints (issue 12; with the one shared index.json of earlier versions it was 14× with
// typical labels and 2531× at the bounds): agent.create + agent.delete of a fresh agent (two writes of agents.json)
// with 100 other agents × 50 checkpoints in the index, their labels either typical (2 short ones)
// or at the bounds (32 × 64-byte keys × 1 KiB values), against the same pair with an empty index,
// measured in the same run. It prints the median and max over its samples and the ratio of the medians.
//
//	go test -run XXX -bench SharedIndex -benchtime 1x ./services/internal/store/
func BenchmarkSharedIndex(b *testing.B) {
	const agents, checkpoints, samples = 100, 50, 30
	typical := map[string]string{"allox.kind": "turn", "allox.turn": "17"}
	bounded := map[string]string{}
	for i := range MaxLabels {
		bounded[fmt.Sprintf("k%02d", i)+strings.Repeat("x", MaxLabelKeyLen-3)] = strings.Repeat("v", MaxLabelValueLen)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{{"typical-labels", typical}, {"labels-at-bounds", bounded}} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				s, _, state := newStore(b)
				base := pairTimes(b, s, samples)
				fillIndex(b, s, agents, checkpoints, tc.labels)
				size := indexSize(b, state)
				full := pairTimes(b, s, samples)
				b.Logf("index %d agents × %d checkpoints, %s: %.1f MiB; agent.create+delete median %v max %v (empty index median %v max %v, %d samples each): ratio %.1f×",
					agents, checkpoints, tc.name, float64(size)/(1<<20), median(full), full[len(full)-1], median(base), base[len(base)-1], samples,
					float64(median(full))/float64(median(base)))
				b.ReportMetric(float64(median(full))/float64(median(base)), "ratio")
				b.ReportMetric(float64(median(full).Microseconds())/1000, "full-p50-ms")
				b.ReportMetric(float64(median(base).Microseconds())/1000, "empty-p50-ms")
				b.ReportMetric(float64(samples), "samples")
			}
		})
	}
}

// fillIndex puts agents × checkpoints records in the index, as other agents' state would be.
func fillIndex(b *testing.B, s *Store, agents, checkpoints int, labels map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UTC()
	for a := range agents {
		id := fmt.Sprintf("other-%d", a)
		sr := &sessionRec{Created: now, Checkpoints: map[string]*cpRec{}}
		for c := range checkpoints {
			sr.Checkpoints[fmt.Sprintf("cp-%d", c)] = &cpRec{Labels: labels, Created: now}
		}
		err := s.update(id, "", func(ix *index) error {
			ix.Agents[id] = &agentRec{Created: now, Sessions: map[string]*sessionRec{}}
			return nil
		})
		if err == nil {
			err = s.update(id, "s", func(ix *index) error { ix.Agents[id].Sessions["s"] = sr; return nil })
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// indexSize is the total size of the index files.
func indexSize(b *testing.B, state string) int64 {
	var n int64
	err := filepath.WalkDir(filepath.Join(state, indexDir), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// pairTimes times n agent.create + agent.delete pairs, sorted.
func pairTimes(b *testing.B, s *Store, n int) []time.Duration {
	var d []time.Duration
	for i := range n {
		id := fmt.Sprintf("probe-%d", i)
		t0 := time.Now()
		if _, err := s.CreateAgent(id); err != nil {
			b.Fatal(err)
		}
		if err := s.DeleteAgent(id); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d
}

func median(d []time.Duration) time.Duration { return d[len(d)/2] }
