package tracker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/allox-os/allox/services/internal/tracked"
)

// maxRunEvents bounds one run's record; further events are counted as
// truncated and not recorded.
const maxRunEvents = 1 << 20

// Event is one recorded fork, exec or exit of a process of a run: one line
// of <dir>/<run_id>.jsonl.
type Event struct {
	Kind            string    `json:"kind"` // fork, exec, exit
	RunID           string    `json:"run_id"`
	Time            time.Time `json:"time"` // when the daemon received it
	PID             int       `json:"pid"`  // process id (thread-group id)
	PPID            int       `json:"ppid"`
	StartTime       uint64    `json:"start_time_ns"`
	ParentStartTime uint64    `json:"parent_start_time_ns"`
	Comm            string    `json:"comm"`
	Filename        string    `json:"filename,omitempty"` // exec: the path given to execve
	Argv            []string  `json:"argv,omitempty"`     // exec: read from /proc when the event arrived, best effort
	ExitCode        *int      `json:"exit_code,omitempty"`
	Signal          int       `json:"signal,omitempty"` // exit: the signal that killed the process
	Root            bool      `json:"root,omitempty"`
}

// Collector is what the ebpf source needs from the eBPF process-tree
// provider (*proctree.Collector). It is an interface so that this package,
// and a daemon built without the provider, do not link the BPF loader.
type Collector interface {
	Register(runID uint64, pid int) error
	Events() <-chan ProcessEvent
	Drops() (uint64, error)
	Close() error
}

// ebpfSource records the collector's events per run.
type ebpfSource struct {
	col  Collector
	dir  string
	proc string
	done chan struct{}

	mu        sync.Mutex
	next      uint64
	ids       map[uint64]string
	counts    map[string]int
	truncated uint64
	writeErr  error
}

// NewEBPF returns a tracker with the ebpf source. It starts recording col's
// events under dir (<dir>/<run_id>.jsonl), which must be outside every
// workspace; every run must be registered with col through the tracker's
// RunHook before the run's command is released. The tracker owns col from
// now on: Close closes it.
func NewEBPF(runs Runs, col Collector, dir string) (*Tracker, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("process records: %w", err)
	}
	s := &ebpfSource{col: col, dir: dir, proc: "/proc", done: make(chan struct{}),
		ids: map[uint64]string{}, counts: map[string]int{}}
	go s.record()
	return &Tracker{runs: runs, proc: "/proc", ebpf: s}, nil
}

// Close stops recording and closes the collector. It is a no-op for the
// cgroup source.
func (t *Tracker) Close() error {
	if t.ebpf == nil {
		return nil
	}
	err := t.ebpf.col.Close()
	<-t.ebpf.done
	return err
}

// RunHook is the ebpf source's part in every run (a tracked.Observer): Begin registers the run's
// first process (bwrap) with the collector before the run's command is released, so that every
// descendant is attributed to the run in the kernel, and reports it as the run's metadata
// ({"root_pid": N}). It is nil for the cgroup source.
func (t *Tracker) RunHook() *RunHook {
	if t.ebpf == nil {
		return nil
	}
	return &RunHook{s: t.ebpf}
}

// RunHook registers runs with the eBPF process-tree collector; see Tracker.RunHook.
type RunHook struct{ s *ebpfSource }

// Begin registers the run; an error fails its start closed.
func (h *RunHook) Begin(st *tracked.Status) (json.RawMessage, error) {
	if err := h.s.register(st.RunID, st.Pid); err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		RootPID int `json:"root_pid"`
	}{st.Pid})
}

// End has nothing to add: the run's events trail it by the ring buffer's poll interval, so
// process.events, not a count taken now, is their record.
func (h *RunHook) End(*tracked.Status, error) (json.RawMessage, error) { return nil, nil }

// Residue has nothing to look at: the collector follows the leftovers until they are killed.
func (h *RunHook) Residue(*tracked.Status) error { return nil }

// register registers a run's first process with the collector.
func (s *ebpfSource) register(runID string, pid int) error {
	s.mu.Lock()
	s.next++
	id := s.next
	s.ids[id] = runID
	s.mu.Unlock()
	if err := s.col.Register(id, pid); err != nil {
		return fmt.Errorf("process tracker: %w", err)
	}
	return nil
}

// record appends the collector's events to the runs' records until the
// collector is closed. Events queued together are written per run in one
// write.
func (s *ebpfSource) record() {
	defer close(s.done)
	for ev := range s.col.Events() {
		batch := map[string][]byte{}
		var order []string
		add := func(ev ProcessEvent) {
			rec, ok := s.convert(ev)
			if !ok {
				return
			}
			b, err := json.Marshal(rec)
			if err != nil {
				return
			}
			if _, seen := batch[rec.RunID]; !seen {
				order = append(order, rec.RunID)
			}
			batch[rec.RunID] = append(append(batch[rec.RunID], b...), '\n')
		}
		add(ev)
	drain:
		for range 256 {
			select {
			case ev, ok := <-s.col.Events():
				if !ok {
					break drain
				}
				add(ev)
			default:
				break drain
			}
		}
		for _, id := range order {
			if err := appendFile(s.path(id), batch[id]); err != nil {
				s.mu.Lock()
				s.writeErr = err
				s.mu.Unlock()
			}
		}
	}
}

// convert turns a collector event into a record, counting it against its
// run's bound. ok is false for events of unknown runs or full records.
func (s *ebpfSource) convert(ev ProcessEvent) (Event, bool) {
	s.mu.Lock()
	runID, ok := s.ids[ev.RunID]
	if ok && s.counts[runID] >= maxRunEvents {
		s.truncated++
		ok = false
	}
	if ok {
		s.counts[runID]++
	}
	s.mu.Unlock()
	if !ok {
		return Event{}, false
	}
	rec := Event{Kind: ev.Kind.String(), RunID: runID, Time: time.Now().UTC(), PID: ev.TGID, PPID: ev.PPID,
		StartTime: ev.StartTime, ParentStartTime: ev.ParentStartTime, Comm: ev.Comm, Root: ev.Root}
	switch ev.Kind {
	case Exec:
		rec.Filename = ev.Filename
		rec.Argv, _ = argvOf(s.proc, ev.TGID)
	case Exit:
		code := ev.ExitCode()
		rec.ExitCode = &code
		if ev.Status.Signaled() {
			rec.Signal = int(ev.Status.Signal())
		}
	}
	return rec, true
}

func (s *ebpfSource) path(runID string) string { return filepath.Join(s.dir, runID+".jsonl") }

func appendFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}

// each calls f for every recorded event of the runs, in order, until f
// returns false.
func (s *ebpfSource) each(runIDs []string, f func(Event) bool) error {
	for _, id := range runIDs {
		file, err := os.Open(s.path(id))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("process record %s: %w", id, err)
		}
		sc := bufio.NewScanner(file)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		more := true
		for more && sc.Scan() {
			var ev Event
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue // a line cut short by a crash
			}
			more = f(ev)
		}
		err = sc.Err()
		file.Close()
		if err != nil {
			return fmt.Errorf("process record %s: %w", id, err)
		}
		if !more {
			return nil
		}
	}
	return nil
}

func (s *ebpfSource) page(runIDs []string, offset, limit int) ([]Event, error) {
	out := []Event{}
	i := 0
	err := s.each(runIDs, func(ev Event) bool {
		if i >= offset {
			out = append(out, ev)
		}
		i++
		return len(out) < limit
	})
	return out, err
}

func (s *ebpfSource) tree(runIDs []string) (*Tree, error) {
	type key struct {
		pid   int
		start uint64
	}
	procs := map[key]*Process{}
	var order []key
	get := func(ev Event) *Process {
		k := key{ev.PID, ev.StartTime}
		p, ok := procs[k]
		if !ok {
			// The parent is the one at the first event (the fork): a
			// later exit may report the reaper the process was moved to.
			p = &Process{PID: ev.PID, PPID: ev.PPID, StartTime: ev.StartTime, ParentStartTime: ev.ParentStartTime,
				RunID: ev.RunID, State: StateRunning, Argv: []string{}}
			procs[k] = p
			order = append(order, k)
		}
		p.Comm = ev.Comm
		p.Root = p.Root || ev.Root
		return p
	}
	err := s.each(runIDs, func(ev Event) bool {
		p := get(ev)
		switch ev.Kind {
		case "exec":
			p.Exe = ev.Filename
			if ev.Argv != nil {
				p.Argv = ev.Argv
			}
		case "exit":
			p.State, p.ExitCode, p.Signal = StateExited, ev.ExitCode, ev.Signal
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	drops, err := s.col.Drops()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	truncated, werr := s.truncated, s.writeErr
	s.mu.Unlock()
	if werr != nil {
		return nil, fmt.Errorf("recording process events: %w", werr)
	}
	t := &Tree{Source: SourceEBPF, Complete: true, Drops: &drops, Truncated: truncated, Processes: make([]Process, 0, len(order))}
	for _, k := range order {
		t.Processes = append(t.Processes, *procs[k])
	}
	return t, nil
}
