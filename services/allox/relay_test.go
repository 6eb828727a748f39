package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pkg/sftp"
)

// upperServer answers each connection with what it read, upper-cased, once the client's side
// has ended.
func upperServer(t *testing.T, ln net.Listener) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, _ := io.ReadAll(c)
			c.Write(bytes.ToUpper(b))
			c.Close()
		}
	}()
}

func TestRelay(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upperServer(t, tcp)
	sock := filepath.Join(t.TempDir(), "ide.sock")
	unix, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	upperServer(t, unix)
	port := strconv.Itoa(tcp.Addr().(*net.TCPAddr).Port)
	for _, args := range [][]string{{"relay", "tcp", "127.0.0.1", port}, {"relay", "unix", sock}, {"relay", "--ready", "unix", sock}} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), args, strings.NewReader("forwarded bytes"), &out, &errs); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		want := map[bool]string{true: RelayReady}[args[1] == "--ready"] + "FORWARDED BYTES"
		if out.String() != want || errs.Len() != 0 {
			t.Errorf("%q: relayed back %q and said %q; want %q and nothing", args, out.String(), errs.String(), want)
		}
	}
}

func TestRelayRefusals(t *testing.T) {
	dead := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"relay", "tcp", "127.0.0.1", "0"}, true, "PORT must be"},
		{[]string{"relay", "tcp", "127.0.0.1", "http"}, true, "PORT must be"},
		{[]string{"relay", "udp", "x", "1"}, true, "use: allox relay"},
		{[]string{"relay", "unix", dead}, false, dead},
		{[]string{"sftp-server", "extra"}, true, "sftp-server"},
	} {
		err := run(context.Background(), tc.args, strings.NewReader(""), io.Discard, io.Discard)
		if err == nil || errors.Is(err, errUsage) != tc.usage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want a usage error %v mentioning %q", tc.args, err, tc.usage, tc.want)
		}
	}
}

func TestSFTPServer(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"sftp-server"}, inR, outW, io.Discard)
		outW.Close()
	}()
	c, err := sftp.NewClientPipe(outR, inW)
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Create("put.txt") // relative: the run's working directory
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("over sftp\n"))
	f.Close()
	if b, err := os.ReadFile(filepath.Join(dir, "put.txt")); err != nil || string(b) != "over sftp\n" {
		t.Fatalf("the put file: %q %v", b, err)
	}
	os.WriteFile(filepath.Join(dir, "get.txt"), []byte("from the run\n"), 0o644)
	g, err := c.Open("get.txt")
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(g).ReadString('\n')
	if line != "from the run\n" {
		t.Fatalf("got %q", line)
	}
	g.Close()
	c.Close()
	inW.Close()
	if err := <-done; err != nil {
		t.Fatalf("sftp-server after the client closed: %v", err)
	}
}
