package term

import (
	"fmt"
	"sort"
	"strings"
)

var namedKeys = map[string]string{
	"enter": "\r", "tab": "\t", "esc": "\x1b", "escape": "\x1b", "space": " ",
	"backspace": "\x7f", "bspace": "\x7f", "delete": "\x1b[3~", "dc": "\x1b[3~", "insert": "\x1b[2~",
	"up": "\x1b[A", "down": "\x1b[B", "right": "\x1b[C", "left": "\x1b[D",
	"home": "\x1b[H", "end": "\x1b[F", "pageup": "\x1b[5~", "ppage": "\x1b[5~", "pagedown": "\x1b[6~", "npage": "\x1b[6~",
	"f1": "\x1bOP", "f2": "\x1bOQ", "f3": "\x1bOR", "f4": "\x1bOS", "f5": "\x1b[15~", "f6": "\x1b[17~",
	"f7": "\x1b[18~", "f8": "\x1b[19~", "f9": "\x1b[20~", "f10": "\x1b[21~", "f11": "\x1b[23~", "f12": "\x1b[24~",
}

// Key returns the bytes of a named key: Enter, Tab, Esc, Space, BSpace, Delete, Up, Down, Left,
// Right, Home, End, PageUp, PageDown, F1–F12, or C-x for Control with a letter or one of @[\]^_.
func Key(name string) ([]byte, error) {
	lower := strings.ToLower(name)
	if s, ok := namedKeys[lower]; ok {
		return []byte(s), nil
	}
	if len(lower) == 3 && (strings.HasPrefix(lower, "c-") || strings.HasPrefix(lower, "^")) || len(lower) == 2 && lower[0] == '^' {
		c := lower[len(lower)-1]
		switch {
		case c >= 'a' && c <= 'z':
			return []byte{c - 'a' + 1}, nil
		case strings.IndexByte("@[\\]^_", c) >= 0:
			return []byte{c ^ 0x40}, nil
		case c == '?':
			return []byte{0x7f}, nil
		}
	}
	names := make([]string, 0, len(namedKeys))
	for k := range namedKeys {
		names = append(names, k)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("key %q: unknown; use one of %s, or C-a … C-z", name, strings.Join(names, ", "))
}
