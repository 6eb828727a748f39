package rpc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var b bytes.Buffer
	for _, p := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte{7}, MaxFrame)} {
		if err := WriteFrame(&b, FrameStdout, p); err != nil {
			t.Fatal(err)
		}
		kind, got, err := ReadFrame(&b)
		if err != nil || kind != FrameStdout || !bytes.Equal(got, p) {
			t.Fatalf("round trip of %d bytes: kind %q, %d bytes, %v", len(p), kind, len(got), err)
		}
	}
}

func TestFrameRefusals(t *testing.T) {
	if err := WriteFrame(io.Discard, FrameStdin, make([]byte, MaxFrame+1)); err == nil {
		t.Error("WriteFrame took a payload beyond MaxFrame")
	}
	big := make([]byte, 5)
	big[0] = FrameStdin
	binary.BigEndian.PutUint32(big[1:], MaxFrame+1)
	if _, _, err := ReadFrame(bytes.NewReader(big)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("ReadFrame of an oversized header: %v", err)
	}
	var b bytes.Buffer
	WriteFrame(&b, FrameStdin, []byte("hello"))
	cut := b.Bytes()[:b.Len()-2]
	if _, _, err := ReadFrame(bytes.NewReader(cut)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("ReadFrame of a truncated payload: %v, want unexpected EOF", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(nil)); !errors.Is(err, io.EOF) {
		t.Errorf("ReadFrame at the end: %v, want EOF", err)
	}
}

func TestSignalNumber(t *testing.T) {
	for name, want := range map[string]syscall.Signal{"killed": syscall.SIGKILL, "terminated": syscall.SIGTERM, "": 0, "no such": 0} {
		if got := SignalNumber(name); got != want {
			t.Errorf("SignalNumber(%q) = %d, want %d", name, got, want)
		}
	}
}
