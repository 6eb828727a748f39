package history

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/services/internal/effects/jsonbytes"
)

// BPF record kinds and flags, equal to the enums in bpf/history.bpf.c.
const (
	bpfSyscall = 1
	bpfFork    = 2
	bpfExec    = 3
	bpfExit    = 4

	flagNoReturn = 1
	flagTrunc0   = 2
	flagFault0   = 16
)

// read writes every record to the history until Stop has detached the
// programs and the ring buffer is empty. Producers wake it only every
// wakeupBatch records, so it also polls every pollInterval; whenever the
// ring is empty it flushes the buffered lines to the writer.
func (r *Recorder) read() {
	defer close(r.done)
	var (
		rec   ringbuf.Record
		final bool
	)
	for {
		r.reader.SetDeadline(time.Now().Add(pollInterval))
		err := r.reader.ReadInto(&rec)
		if errors.Is(err, ringbuf.ErrFlushed) {
			// Stop flushed the reader after the detach: every record is in.
			if r.werr == nil {
				r.werr = r.out.Flush()
			}
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Idle: hand the buffered lines to the writer.
			if r.werr == nil {
				r.werr = r.out.Flush()
			}
			select {
			case <-r.stopping:
				// The ring was empty, but perhaps before the detach:
				// one more pass that starts after it.
				if final {
					return
				}
				final = true
			default:
			}
			continue
		}
		if err != nil {
			if r.werr == nil {
				r.werr = err
			}
			return
		}
		ev, ok := r.decode(rec.RawSample)
		if !ok {
			r.undecodable++ // counted as dropped: the history lacks it
			continue
		}
		r.account(&ev)
	}
}

// account numbers, counts and writes ev.
func (r *Recorder) account(ev *Event) {
	ev.Seq = r.seq
	r.seq++
	r.sum.Events++
	switch ev.Kind {
	case KindFork:
		r.sum.Forks++
	case KindExec:
		r.sum.Execs++
	case KindExit:
		r.sum.Exits++
	case KindSyscall:
		r.sum.Syscalls[ev.Syscall]++
	}
	k := procKey{ev.TGID, ev.StartTime}
	if _, seen := r.procs[k]; !seen && ev.TGID != 0 {
		r.procs[k] = struct{}{}
		r.sum.Processes = len(r.procs)
	}
	r.write(ev)
}

func (r *Recorder) write(ev *Event) {
	if r.werr != nil {
		return
	}
	r.line = appendEvent(r.line[:0], ev)
	_, r.werr = r.out.Write(r.line)
}

func (r *Recorder) decode(raw []byte) (Event, bool) {
	var e historyEvent
	if len(raw) < int(unsafe.Sizeof(e)) {
		return Event{}, false
	}
	// The record is the C struct event, laid out as the host lays out
	// historyEvent (bpf2go generates it with structs.HostLayout).
	e = *(*historyEvent)(unsafe.Pointer(&raw[0]))
	ev := Event{
		TimeNS:    e.Ts,
		PID:       int(e.Pid),
		TGID:      int(e.Tgid),
		PPID:      int(e.Ppid),
		StartTime: e.StartTime,
		Comm:      cstring(e.Comm[:]),
		CgroupID:  e.CgroupId,
	}
	switch e.Kind {
	case bpfFork:
		ev.Kind = KindFork
		ev.ParentStartTime = e.Args[0]
	case bpfExec:
		ev.Kind = KindExec
		ev.Filename = cstring(e.Str[0][:])
	case bpfExit:
		ev.Kind = KindExit
		ws := syscall.WaitStatus(e.ExitCode)
		if ws.Signaled() {
			ev.Signal = int(ws.Signal())
		} else {
			st := ws.ExitStatus()
			ev.ExitStatus = &st
		}
	case bpfSyscall:
		s, ok := r.table[e.Nr]
		if !ok {
			return Event{}, false
		}
		ev.Kind = KindSyscall
		decodeArgs(&ev, s, e.Args, e.Indirect, e.Flags, &e.Str)
		if e.Flags&flagNoReturn != 0 {
			ev.NoReturn = true
		} else {
			ret := e.Ret
			ev.Ret = &ret
			if ret < 0 && ret >= -4095 {
				ev.Errno = unix.ErrnoName(syscall.Errno(-ret))
			}
		}
	default:
		return Event{}, false
	}
	return ev, true
}

// decodeArgs names the arguments of a syscall event after its spec.
func decodeArgs(ev *Event, s *syscallSpec, args [nargs]uint64, indirect uint64, flags uint32, strs *[nstr][256]int8) {
	ev.Syscall, ev.Nr = s.name, int(s.nr)
	k := 0
	for i, a := range s.args {
		name, str, _ := argName(a)
		switch {
		case name == "":
		case !str:
			if ev.Args == nil {
				ev.Args = make(map[string]int64, len(s.args))
			}
			if strings.HasPrefix(a, "+") {
				ev.Args[name] = int64(args[i])
			} else {
				ev.Args[name] = int64(int32(args[i]))
			}
		case strs == nil:
			// An unfinished syscall: its strings were never read.
			ev.Unreadable = append(ev.Unreadable, name)
		default:
			switch {
			case args[i] == 0:
				// A NULL pointer (e.g. utimensat on a descriptor).
			case flags&(flagFault0<<k) != 0:
				ev.Unreadable = append(ev.Unreadable, name)
			default:
				if ev.Strings == nil {
					ev.Strings = make(map[string]jsonbytes.String, nstr)
				}
				ev.Strings[name] = cstring(strs[k][:])
				if flags&(flagTrunc0<<k) != 0 {
					ev.Truncated = append(ev.Truncated, name)
				}
			}
		}
		if str {
			k++
		}
	}
	if s.indirect && strs != nil {
		if ev.Args == nil {
			ev.Args = map[string]int64{}
		}
		ev.Args[s.filter+".flags"] = int64(indirect)
	}
}

// pendingEvent is the event of a syscall entered but not returned.
func (r *Recorder) pendingEvent(tid uint32, p *historyPending) (Event, bool) {
	s, ok := r.table[p.Nr]
	if !ok {
		return Event{}, false
	}
	ev := Event{Kind: KindSyscall, TimeNS: p.Ts, PID: int(tid), Unfinished: true}
	if st, err := procStatus(int(tid)); err == nil {
		ev.TGID, ev.PPID, ev.Comm = st.tgid, st.ppid, jsonbytes.String(st.comm)
	}
	decodeArgs(&ev, s, p.Args, 0, 0, nil)
	return ev, true
}

// cstring copies the NUL-terminated string at the start of b.
func cstring(b []int8) jsonbytes.String {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	if n == 0 {
		return ""
	}
	return jsonbytes.String(unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), n))
}
