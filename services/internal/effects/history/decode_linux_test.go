package history

import (
	"testing"
	"unsafe"
)

// BenchmarkDecodeRecord is the reader's cost per record, without the ring
// buffer: decoding a raw renameat2 record and encoding its line.
func BenchmarkDecodeRecord(b *testing.B) {
	table, err := tableByNr()
	if err != nil {
		b.Fatal(err)
	}
	r := &Recorder{table: table}
	var e historyEvent
	e.Kind, e.Nr, e.Pid, e.Tgid, e.Ret = bpfSyscall, uint32(syscallByName("renameat2").nr), 10, 10, 0
	for i, s := range []string{"/tmp/session/a.txt", "/tmp/session/b.txt"} {
		for j := range s {
			e.Str[i][j] = int8(s[j])
		}
	}
	copy(e.Comm[:], []int8{'m', 'v'})
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&e)), unsafe.Sizeof(e))
	var line []byte
	for b.Loop() {
		ev, ok := r.decode(raw)
		if !ok {
			b.Fatal("decode failed")
		}
		line = appendEvent(line[:0], &ev)
	}
}
