package history

import (
	"slices"
	"strconv"

	"github.com/allox-os/allox/services/internal/effects/jsonbytes"
)

// appendEvent appends ev as one canonical JSON line: byte for byte what
// encoding/json writes for Event with HTML escaping off (fields in
// declaration order, empty ones omitted, map keys sorted, byte strings in
// their jsonbytes form), without its reflection, which the recorder cannot
// afford per event.
func appendEvent(b []byte, ev *Event) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, ev.Seq, 10)
	b = jsonbytes.Append(append(b, `,"kind":`...), ev.Kind)
	b = appendUintField(b, "time_ns", ev.TimeNS)
	b = appendIntField(b, "pid", int64(ev.PID))
	b = appendIntField(b, "tgid", int64(ev.TGID))
	b = appendIntField(b, "ppid", int64(ev.PPID))
	b = appendUintField(b, "start_time", ev.StartTime)
	b = appendStringField(b, "comm", string(ev.Comm))
	b = appendUintField(b, "cgroup_id", ev.CgroupID)
	b = appendUintField(b, "parent_start_time", ev.ParentStartTime)
	b = appendStringField(b, "filename", string(ev.Filename))
	if ev.ExitStatus != nil {
		b = append(b, `,"exit_status":`...)
		b = strconv.AppendInt(b, int64(*ev.ExitStatus), 10)
	}
	b = appendIntField(b, "signal", int64(ev.Signal))
	b = appendStringField(b, "syscall", ev.Syscall)
	b = appendIntField(b, "nr", int64(ev.Nr))
	if len(ev.Args) > 0 {
		b = append(b, `,"args":{`...)
		var small [8]string
		for i, k := range sortKeys(small[:0], ev.Args) {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonbytes.Append(b, k)
			b = append(b, ':')
			b = strconv.AppendInt(b, ev.Args[k], 10)
		}
		b = append(b, '}')
	}
	if len(ev.Strings) > 0 {
		b = append(b, `,"strings":{`...)
		var small [8]string
		for i, k := range sortKeys(small[:0], ev.Strings) {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonbytes.Append(b, k)
			b = append(b, ':')
			b = jsonbytes.Append(b, string(ev.Strings[k]))
		}
		b = append(b, '}')
	}
	b = appendStrings(b, "truncated", ev.Truncated)
	b = appendStrings(b, "unreadable", ev.Unreadable)
	if ev.Ret != nil {
		b = append(b, `,"ret":`...)
		b = strconv.AppendInt(b, *ev.Ret, 10)
	}
	b = appendStringField(b, "errno", ev.Errno)
	b = appendBoolField(b, "noreturn", ev.NoReturn)
	b = appendBoolField(b, "unfinished", ev.Unfinished)
	b = appendUintField(b, "dropped", ev.Dropped)
	b = appendBoolField(b, "incomplete", ev.Incomplete)
	return append(b, '}', '\n')
}

// sortKeys appends the keys of m to keys, sorted; with a caller's array
// behind keys, a syscall's few arguments need no allocation.
func sortKeys[V any](keys []string, m map[string]V) []string {
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// The names (kind, syscall, errno, argument names) come from the syscall table and are ASCII:
// their jsonbytes form is the JSON string encoding/json writes.

func appendKey(b []byte, name string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendStringField(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return jsonbytes.Append(appendKey(b, name), v)
}

func appendUintField(b []byte, name string, v uint64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendUint(appendKey(b, name), v, 10)
}

func appendIntField(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(appendKey(b, name), v, 10)
}

func appendBoolField(b []byte, name string, v bool) []byte {
	if !v {
		return b
	}
	return append(appendKey(b, name), "true"...)
}

func appendStrings(b []byte, name string, v []string) []byte {
	if len(v) == 0 {
		return b
	}
	b = append(appendKey(b, name), '[')
	for i, s := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonbytes.Append(b, s)
	}
	return append(b, ']')
}
