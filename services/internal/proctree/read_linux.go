package proctree

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// read drains the ring buffer into c.events until the reader is closed.
// Producers wake it only every wakeupBatch events, so it also polls every
// pollInterval to pick up records submitted without a wake-up.
func (c *Collector) read() {
	defer c.wg.Done()
	var rec ringbuf.Record
	for {
		c.reader.SetDeadline(time.Now().Add(pollInterval))
		err := c.reader.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return // closed
		}
		ev, ok := decode(rec.RawSample)
		if !ok {
			continue
		}
		select {
		case c.events <- ev:
		case <-c.done:
			return
		}
	}
}

func decode(raw []byte) (Event, bool) {
	var e proctreeEvent
	if err := binary.Read(bytes.NewReader(raw), binary.NativeEndian, &e); err != nil {
		return Event{}, false
	}
	return Event{
		Kind:            Kind(e.Kind),
		RunID:           e.RunId,
		PID:             int(e.Pid),
		TGID:            int(e.Tgid),
		PPID:            int(e.Ppid),
		StartTime:       e.StartTime,
		ParentStartTime: e.ParentStartTime,
		CgroupID:        e.CgroupId,
		Comm:            cstring(e.Comm[:]),
		Filename:        cstring(e.Filename[:]),
		Status:          syscall.WaitStatus(e.ExitCode),
		Root:            e.Root != 0,
	}, true
}

func cstring(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
