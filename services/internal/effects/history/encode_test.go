package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/allox-os/allox/services/internal/effects/jsonbytes"
)

func ptr[T any](v T) *T { return &v }

var sampleEvents = []Event{
	{Seq: 0, Kind: KindFork, TimeNS: 1, PID: 10, TGID: 10, PPID: 9, StartTime: 5, Comm: "sh", CgroupID: 77, ParentStartTime: 3},
	{Seq: 1, Kind: KindExec, PID: 10, TGID: 10, Comm: "mv", Filename: "/usr/bin/mv"},
	{Seq: 2, Kind: KindExit, PID: 10, TGID: 10, ExitStatus: ptr(0)},
	{Seq: 3, Kind: KindExit, PID: 11, TGID: 11, Signal: 9},
	{Seq: 4, Kind: KindSyscall, PID: 12, TGID: 12, Syscall: "renameat2", Nr: 316,
		Args:    map[string]int64{"olddfd": -100, "newdfd": -100, "flags": 1},
		Strings: map[string]jsonbytes.String{"oldpath": "a\"b\\c\n\t\x01<>&", "newpath": "\xff\u2028\u2029é", "cwd": "\u2028\uFFFD"},
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
		ev := Event{Seq: id, Kind: KindSyscall, Comm: jsonbytes.String(comm), CgroupID: id, Syscall: "openat",
			Args: map[string]int64{"dfd": arg, "flags": 1}, Strings: map[string]jsonbytes.String{"path": jsonbytes.String(path), "newpath": jsonbytes.String(comm)},
			Ret: &arg, Truncated: []string{"path"}}
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
	for _, ev := range sampleEvents[:5] {
		buf.Write(appendEvent(nil, &ev))
	}
	got, err := ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sampleEvents[:5], got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestDecoderRejects(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"unknown field", `{"seq":0,"kind":"fork","colour":1}`},
		{"trailing data", `{"seq":0,"kind":"fork"} {}`},
		{"not json", `seq=0`},
		{"wrong type", `{"seq":"0"}`},
		{"raw invalid UTF-8", "{\"seq\":0,\"kind\":\"exec\",\"filename\":\"f\xfe\"}"},
		{"lossy escape", `{"seq":0,"kind":"exec","filename":"f\udcfe"}`},
		{"base64 of UTF-8", `{"seq":0,"kind":"exec","filename":{"base64":"Zg=="}}`},
		{"base64 and more", `{"seq":0,"kind":"exec","filename":{"base64":"Zv4=","utf8":"f"}}`},
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

// fileEvent is a rename by a process named comm from oldpath to newpath.
func fileEvent(comm, oldpath, newpath []byte) Event {
	return Event{Seq: 9, Kind: KindSyscall, PID: 3, TGID: 3, Comm: jsonbytes.String(comm), Syscall: "rename", Nr: 82,
		Strings: map[string]jsonbytes.String{"oldpath": jsonbytes.String(oldpath), "newpath": jsonbytes.String(newpath)},
		Ret:     ptr(int64(0))}
}

// FuzzHistoryRoundTrip: the byte strings of an event (comm, exec file name, string arguments)
// decode to exactly the bytes recorded.
func FuzzHistoryRoundTrip(f *testing.F) {
	f.Add([]byte("mv"), []byte("f\xfe"), []byte("f\xff"))
	f.Add([]byte("\xff\n"), []byte("f\uFFFD"), []byte(`{"base64":"Zv4="}`))
	f.Add([]byte(""), []byte("\u2028\x00"), []byte("\xed\xa0\x80"))
	f.Fuzz(func(t *testing.T, comm, oldpath, newpath []byte) {
		evs := []Event{fileEvent(comm, oldpath, newpath),
			{Seq: 10, Kind: KindExec, PID: 3, TGID: 3, Comm: jsonbytes.String(comm), Filename: jsonbytes.String(oldpath)}}
		var buf bytes.Buffer
		for i := range evs {
			buf.Write(appendEvent(nil, &evs[i]))
		}
		got, err := ReadAll(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		// The byte strings compared directly, the rest by its encoding: cmp.Diff per input would
		// slow the fuzzer down many times.
		if len(got) != 2 || got[0].Comm != evs[0].Comm || got[0].Strings["oldpath"] != evs[0].Strings["oldpath"] ||
			got[0].Strings["newpath"] != evs[0].Strings["newpath"] || got[1].Filename != evs[1].Filename ||
			!bytes.Equal(appendEvent(appendEvent(nil, &got[0]), &got[1]), buf.Bytes()) {
			t.Fatalf("round trip (-want +got):\n%s", cmp.Diff(evs, got, cmpopts.EquateEmpty()))
		}
	})
}

// FuzzHistoryOneToOne: events that differ in any byte of a byte string never share a line.
func FuzzHistoryOneToOne(f *testing.F) {
	f.Add([]byte("mv"), []byte("f\xfe"), []byte("mv"), []byte("f\xff"))
	f.Add([]byte("mv"), []byte("f\uFFFD"), []byte("mv"), []byte("f\xfe"))
	f.Add([]byte("a\xfe"), []byte("x"), []byte("a\xff"), []byte("x"))
	f.Fuzz(func(t *testing.T, comm1, path1, comm2, path2 []byte) {
		e1, e2 := fileEvent(comm1, path1, path2), fileEvent(comm2, path2, path1)
		l1, l2 := appendEvent(nil, &e1), appendEvent(nil, &e2)
		same := bytes.Equal(comm1, comm2) && bytes.Equal(path1, path2)
		if same != bytes.Equal(l1, l2) {
			t.Fatalf("(%q, %q, %q) and (%q, %q, %q) encode to\n%s%s", comm1, path1, path2, comm2, path2, path1, l1, l2)
		}
	})
}
