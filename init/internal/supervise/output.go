package supervise

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path/filepath"
)

const (
	maxLine = 4096    // longer lines reach the console in pieces
	maxLog  = 8 << 20 // a log file this big moves to <name>.log.1 (the /run tmpfs is RAM)
)

// output returns the write end of a pipe whose lines go to the console as "[name] line" and to
// LogDir/name.log. done is closed when the last writer is gone.
func (s *Supervisor) output(name string) (*os.File, <-chan struct{}, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	var log io.WriteCloser
	if s.cfg.LogDir != "" {
		l, err := openLog(filepath.Join(s.cfg.LogDir, name+".log"))
		if err != nil {
			s.emit(Event{Service: name, Kind: Warning, Err: err})
		} else {
			log = l
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyLines(r, "["+name+"] ", s.cfg.Console, log)
	}()
	return w, done, nil
}

// copyLines copies r line by line: prefixed to console, as is to log. It closes r and log.
func copyLines(r io.ReadCloser, prefix string, console io.Writer, log io.WriteCloser) {
	defer r.Close()
	if log != nil {
		defer log.Close()
	}
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if line[len(line)-1] != '\n' {
				line = append(line[:len(line):len(line)], '\n')
			}
			if console != nil {
				console.Write(append([]byte(prefix), line...))
			}
			if log != nil {
				log.Write(line)
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// logFile appends to a file and moves it aside once it passes maxLog.
type logFile struct {
	path string
	f    *os.File
	size int64
}

func openLog(path string) (*logFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &logFile{path: path, f: f, size: fi.Size()}, nil
}

func (l *logFile) Write(p []byte) (int, error) {
	if l.size+int64(len(p)) > maxLog {
		if err := os.Rename(l.path, l.path+".1"); err == nil {
			if f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640); err == nil {
				l.f.Close()
				l.f, l.size = f, 0
			}
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

func (l *logFile) Close() error { return l.f.Close() }
