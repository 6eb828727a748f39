package vm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Line is one line of the serial console and when the host read it.
type Line struct {
	Text string
	At   time.Duration // since QEMU was started, on the host clock
}

// ErrExited is wrapped by WaitFor when QEMU exits before the awaited text appears.
var ErrExited = errors.New("qemu exited")

// TailLines is how many console lines an error of WaitFor quotes.
const TailLines = 40

// console keeps every line read from the serial port and wakes waiters when one arrives.
type console struct {
	mu      sync.Mutex
	lines   []Line
	ended   bool
	changed chan struct{} // closed and replaced on every change
}

func newConsole() *console { return &console{changed: make(chan struct{})} }

func (c *console) add(l Line) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, l)
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *console) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	close(c.changed)
	c.changed = make(chan struct{})
}

// find looks for substr in lines[from:]; it also returns where to look next time, whether the
// console has ended, and a channel closed on the next change.
func (c *console) find(from int, substr string) (l Line, ok bool, next int, ended bool, changed <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := from; i < len(c.lines); i++ {
		if strings.Contains(c.lines[i].Text, substr) {
			return c.lines[i], true, i + 1, c.ended, c.changed
		}
	}
	return Line{}, false, len(c.lines), c.ended, c.changed
}

func (c *console) snapshot() []Line {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Line(nil), c.lines...)
}

// tail quotes the last n lines, one per line, for error messages.
func (c *console) tail(n int) string {
	lines := c.snapshot()
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "last %d console lines:", len(lines))
	for _, l := range lines {
		fmt.Fprintf(&b, "\n  | %s", l.Text)
	}
	return b.String()
}

// terminalControl matches the escape sequences firmware writes to the serial port (SeaBIOS clears
// the screen and hides the cursor), which say nothing in a log.
var terminalControl = regexp.MustCompile(`\x1b(\[[0-9;?]*[A-Za-z]|[A-Za-z])`)

// readLines splits r into lines (dropping "\r" and terminal escapes), calls emit for each, and
// flushes a last unterminated line at EOF.
func readLines(r io.Reader, emit func(string)) {
	br := bufio.NewReader(r)
	for {
		s, err := br.ReadString('\n')
		if s != "" {
			emit(terminalControl.ReplaceAllString(strings.TrimRight(s, "\r\n"), ""))
		}
		if err != nil {
			return
		}
	}
}

// WaitFor waits until a console line contains substr and returns that line. It searches the whole
// console since boot, so markers may be awaited in any order and more than once. It fails when ctx
// is done or QEMU exits first; the error quotes the last TailLines console lines.
func (v *VM) WaitFor(ctx context.Context, substr string) (string, error) {
	l, err := v.WaitForLine(ctx, substr)
	return l.Text, err
}

// WaitForLine is WaitFor that also returns when, after QEMU started, the host read the line.
func (v *VM) WaitForLine(ctx context.Context, substr string) (Line, error) {
	from := 0
	for {
		l, ok, next, ended, changed := v.console.find(from, substr)
		if ok {
			return l, nil
		}
		if ended {
			select { // the exit status is known right after the console ends
			case <-v.done:
			case <-ctx.Done():
				return Line{}, fmt.Errorf("wait for %q: console ended, qemu still running: %w", substr, ctx.Err())
			}
			return Line{}, fmt.Errorf("wait for %q: %w (%v)\n%s", substr, ErrExited, v.exitDescription(), v.console.tail(TailLines))
		}
		from = next
		select {
		case <-changed:
		case <-ctx.Done():
			return Line{}, fmt.Errorf("wait for %q after %v: %w\n%s", substr, v.Uptime().Round(time.Millisecond), ctx.Err(), v.console.tail(TailLines))
		}
	}
}

// Console returns every console line read so far.
func (v *VM) Console() []Line { return v.console.snapshot() }

var kernelTime = regexp.MustCompile(`^\[\s*(\d+)\.(\d{6})\]`)

// ParseKernelTime reads the printk timestamp ("[    4.599160] ...", CONFIG_PRINTK_TIME) that
// starts a kernel console line: time since the kernel started, on the guest clock.
func ParseKernelTime(line string) (time.Duration, bool) {
	m := kernelTime.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	s, err1 := strconv.ParseInt(m[1], 10, 64)
	us, err2 := strconv.ParseInt(m[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(s)*time.Second + time.Duration(us)*time.Microsecond, true
}
