package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func ptr[T any](v T) *T { return &v }

var sampleEvents = []Event{
	{Seq: 0, Kind: KindFork, TimeNS: 1, PID: 10, TGID: 10, PPID: 9, StartTime: 5, Comm: "sh", CgroupID: 77, ParentStartTime: 3},
	{Seq: 1, Kind: KindExec, PID: 10, TGID: 10, Comm: "mv", Filename: "/usr/bin/mv"},
	{Seq: 2, Kind: KindExit, PID: 10, TGID: 10, ExitStatus: ptr(0)},
	{Seq: 3, Kind: KindExit, PID: 11, TGID: 11, Signal: 9},
	{Seq: 4, Kind: KindSyscall, PID: 12, TGID: 12, Syscall: "renameat2", Nr: 316,
		Args:    map[string]int64{"olddfd": -100, "newdfd": -100, "flags": 1},
		Strings: map[string]string{"oldpath": "a\"b\\c\n\t\x01<>&", "newpath": "\xff\u2028\u2029é"},
		Ret:     ptr(int64(-17)), Errno: "EEXIST", Truncated: []string{"oldpath"}, Unreadable: []string{"x"}},
	{Seq: 5, Kind: KindSyscall, Syscall: "openat", Unfinished: true, NoReturn: true, Ret: ptr(int64(0))},
	{Seq: 6, Kind: KindEnd, Dropped: 3, Incomplete: true},
	{},
}

// TestEncodeCanonical: the recorder's encoder writes what encoding/json
// writes, so any JSON tool reproduces a history byte for byte.
func TestEncodeCanonical(t *testing.T) {
	for _, ev := range sampleEvents {
		if diff := cmp.Diff(stdEncode(t, &ev), string(appendEvent(nil, &ev))); diff != "" {
			t.Errorf("event %+v (-encoding/json +appendEvent):\n%s", ev, diff)
		}
	}
}

func FuzzEncodeCanonical(f *testing.F) {
	f.Add("/tmp/a.txt", "comm", int64(-100), uint64(7))
	f.Add("\xff\xfe\u2028\"\\\x00", "", int64(0), uint64(0))
	f.Fuzz(func(t *testing.T, path, comm string, arg int64, id uint64) {
		ev := Event{Seq: id, Kind: KindSyscall, Comm: comm, CgroupID: id, Syscall: "openat",
			Args: map[string]int64{"dfd": arg, "flags": 1}, Strings: map[string]string{"path": path, comm: path},
			Ret: &arg, Truncated: []string{path}}
		if got, want := string(appendEvent(nil, &ev)), stdEncode(t, &ev); got != want {
			t.Fatalf("appendEvent %q, encoding/json %q", got, want)
		}
	})
}

func stdEncode(t *testing.T, ev *Event) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestDecoderRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	for _, ev := range sampleEvents[:4] {
		buf.Write(appendEvent(nil, &ev))
	}
	got, err := ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sampleEvents[:4], got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestDecoderRejects(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"unknown field", `{"seq":0,"kind":"fork","colour":1}`},
		{"trailing data", `{"seq":0,"kind":"fork"} {}`},
		{"not json", `seq=0`},
		{"wrong type", `{"seq":"0"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadAll(strings.NewReader(`{"seq":0,"kind":"exec"}` + "\n" + tc.in + "\n"))
			if err == nil || !strings.Contains(err.Error(), "history line 2") {
				t.Errorf("ReadAll = %v; want an error naming line 2", err)
			}
		})
	}
	if _, err := ReadAll(strings.NewReader(strings.Repeat("x", maxLine+1))); err == nil || errors.Is(err, nil) {
		t.Errorf("ReadAll of an overlong line = %v; want an error", err)
	}
}

func FuzzDecoder(f *testing.F) {
	for _, ev := range sampleEvents {
		f.Add(appendEvent(nil, &ev))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		evs, err := ReadAll(bytes.NewReader(in))
		if err != nil {
			return
		}
		// Whatever decodes re-encodes and decodes to the same events.
		var buf bytes.Buffer
		for i := range evs {
			buf.Write(appendEvent(nil, &evs[i]))
		}
		again, err := ReadAll(&buf)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if diff := cmp.Diff(evs, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("re-encode changed events:\n%s", diff)
		}
	})
}

// BenchmarkAppendEvent is the encoding cost of a typical file event.
func BenchmarkAppendEvent(b *testing.B) {
	ev := sampleEvents[4]
	var buf []byte
	for b.Loop() {
		buf = appendEvent(buf[:0], &ev)
	}
}
