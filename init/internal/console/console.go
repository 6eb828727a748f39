// Package console is init's one writer to the system console. Log records, boot markers and the
// output lines of services go through one queue to one writer goroutine, a whole line per write,
// so lines never mix and keep their order. Service output is lossy: when the console is slower
// than the services (a serial line, a host that does not read), their lines are dropped and
// counted rather than blocking the services.
package console

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Path is the kernel's console device.
const Path = "/dev/console"

const queueLen = 1024

type item struct {
	b    []byte
	done chan struct{} // a Flush marker when non-nil
}

// Console writes to Path, or to a fallback while Path cannot be opened (before /dev is mounted
// on an image without a /dev/console node).
type Console struct {
	mu       sync.Mutex
	path     string
	fallback io.Writer
	f        *os.File
	queue    chan item
	dropped  atomic.Int64
}

// Open opens path for writing, falling back to fallback when that fails, and starts the writer.
func Open(path string, fallback io.Writer) *Console {
	c := &Console{path: path, fallback: fallback, queue: make(chan item, queueLen)}
	c.Reopen()
	go c.drain()
	return c
}

// Reopen tries path again if the console is still using its fallback.
func (c *Console) Reopen() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != nil {
		return
	}
	if f, err := os.OpenFile(c.path, os.O_WRONLY|syscall.O_NOCTTY|os.O_APPEND, 0); err == nil {
		c.f = f
	}
}

// Write queues a copy of p, waiting for room: for init's own log records.
func (c *Console) Write(p []byte) (int, error) {
	c.queue <- item{b: append([]byte(nil), p...)}
	return len(p), nil
}

// Line queues s and a newline: the form of every boot marker.
func (c *Console) Line(s string) { c.queue <- item{b: []byte(s + "\n")} }

// Lossy is a writer for service output: it never waits, and drops what finds the queue full.
func (c *Console) Lossy() io.Writer { return lossy{c} }

type lossy struct{ c *Console }

func (l lossy) Write(p []byte) (int, error) {
	select {
	case l.c.queue <- item{b: append([]byte(nil), p...)}:
	default:
		l.c.dropped.Add(1)
	}
	return len(p), nil
}

// Flush waits, at most timeout, until everything queued before it is written.
func (c *Console) Flush(timeout time.Duration) bool {
	done := make(chan struct{})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case c.queue <- item{done: done}:
	case <-t.C:
		return false
	}
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func (c *Console) drain() {
	for it := range c.queue {
		if it.done != nil {
			close(it.done)
			continue
		}
		if n := c.dropped.Swap(0); n > 0 {
			c.write([]byte(fmt.Sprintf("[console] %d lines of service output dropped: the console is too slow (see /run/allox/log)\n", n)))
		}
		c.write(it.b)
	}
}

// write sends one line; errors are dropped (there is nowhere to report them).
func (c *Console) write(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != nil {
		c.f.Write(b)
	} else if c.fallback != nil {
		c.fallback.Write(b)
	}
}
