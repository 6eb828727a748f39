package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
	"golang.org/x/sys/unix"
)

// DetachKey ends an attach without touching the terminal (C-\, as dtach).
const DetachKey = 0x1c

func attach(ctx context.Context, c *Context, inv *invocation) error {
	name, err := needName(inv, "attach")
	if err != nil {
		return err
	}
	conn, closeConn, err := c.openStream(ctx, inv, "attach", wire.TailArgs{Name: name})
	if err != nil {
		return err
	}
	defer closeConn()
	in, _ := c.Stdin.(*os.File)
	if in != nil {
		if restore, err := rawMode(int(in.Fd())); err == nil {
			defer restore()
			sendSize(conn, int(in.Fd()))
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, syscall.SIGWINCH)
			defer signal.Stop(winch)
			go func() {
				for range winch {
					sendSize(conn, int(in.Fd()))
				}
			}()
		}
	}
	detached := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Stdin.Read(buf)
			if n > 0 {
				p := buf[:n]
				if i := bytes.IndexByte(p, DetachKey); i >= 0 {
					if i > 0 {
						_ = conn.Send(wire.Frame{Input: append([]byte(nil), p[:i]...)})
					}
					close(detached)
					conn.Close()
					return
				}
				if conn.Send(wire.Frame{Input: append([]byte(nil), p...)}) != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	err = frames(conn, func(f wire.Frame) (bool, error) {
		_, _ = c.Stdout.Write(f.Output)
		if f.End {
			code := 0
			if f.Exit != nil {
				code = *f.Exit
			}
			fmt.Fprintf(c.Stderr, "\r\n[%s exited with status %d]\r\n", name, code)
		}
		return f.End, nil
	})
	if _, ok := err.(*streamClosed); ok {
		select {
		case <-detached:
			fmt.Fprintf(c.Stderr, "\r\n[detached from %s]\r\n", name)
			return nil
		default:
			return fmt.Errorf("attach %s: connection closed: %w", name, err)
		}
	}
	return err
}

func sendSize(conn *wire.Conn, fd int) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err == nil && ws.Col > 0 && ws.Row > 0 {
		_ = conn.Send(wire.Frame{Size: &[2]int{int(ws.Col), int(ws.Row)}})
	}
}

// rawMode puts the local terminal in raw mode, like cfmakeraw, and returns its undo.
func rawMode(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
