package evidence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// A snapshot file is JSON Lines: the first line is the snapshot without its items
// ({"domain":…,"point":…,…,"items":N}), then one line per item, ["key","value"], N of them.
// A workspace of 10,000 files is 10,000 short lines; written and read line by line this is
// several times faster than one JSON document decoded by reflection, and `jq -c .` still reads it.

// snapshotHead is a snapshot file's first line.
type snapshotHead struct {
	Domain        string   `json:"domain"`
	Point         string   `json:"point"`
	Unconfirmable string   `json:"unconfirmable,omitempty"`
	Note          string   `json:"note,omitempty"`
	Excluded      []string `json:"excluded,omitempty"`
	Items         int      `json:"items"`
}

// encodeSnapshot renders s as a snapshot file.
func encodeSnapshot(s *Snapshot) ([]byte, error) {
	head, err := json.Marshal(snapshotHead{Domain: s.Domain, Point: s.Point, Unconfirmable: s.Unconfirmable,
		Note: s.Note, Excluded: s.Excluded, Items: len(s.Items)})
	if err != nil {
		return nil, err
	}
	size := len(head) + 1
	for _, it := range s.Items {
		size += len(it.Key) + len(it.Value) + 8
	}
	b := make([]byte, 0, size)
	b = append(append(b, head...), '\n')
	for _, it := range s.Items {
		b = append(b, '[')
		b = appendString(b, it.Key)
		b = append(b, ',')
		b = appendString(b, it.Value)
		b = append(b, "]\n"...)
	}
	return b, nil
}

// appendString appends s as a JSON string: printable ASCII without quotes or backslashes as it
// is, anything else as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// decodeSnapshot parses a snapshot file, refusing unknown fields, a malformed line and a count
// of items that does not match the first line.
func decodeSnapshot(b []byte) (*Snapshot, error) {
	first, _, _ := bytes.Cut(b, []byte{'\n'})
	var h snapshotHead
	dec := json.NewDecoder(bytes.NewReader(first))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("line 1: %w", err)
	}
	if h.Items < 0 {
		return nil, fmt.Errorf("line 1: items %d", h.Items)
	}
	s := &Snapshot{Domain: h.Domain, Point: h.Point, Unconfirmable: h.Unconfirmable, Note: h.Note,
		Excluded: h.Excluded, Items: make([]Item, 0, h.Items)}
	// One string for the whole file: the items' keys and values are slices of it.
	rest := string(b[min(len(first)+1, len(b)):])
	for n := 2; len(rest) > 0; n++ {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		if len(s.Items) == h.Items {
			return nil, fmt.Errorf("line %d: more than the %d items line 1 announces", n, h.Items)
		}
		it, err := decodeItem(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		s.Items = append(s.Items, it)
	}
	if len(s.Items) != h.Items {
		return nil, fmt.Errorf("%d items, but line 1 announces %d", len(s.Items), h.Items)
	}
	return s, nil
}

var errItem = errors.New(`an item is one line ["key","value"]`)

// decodeItem parses one item line. A line of printable ASCII or valid UTF-8 without escapes is
// split where it stands; any other goes through encoding/json.
func decodeItem(line string) (Item, error) {
	if k, v, ok := splitPlain(line); ok {
		return Item{Key: k, Value: v}, nil
	}
	var kv []string
	if err := json.Unmarshal([]byte(line), &kv); err != nil {
		return Item{}, fmt.Errorf("%w: %v", errItem, err)
	}
	if len(kv) != 2 {
		return Item{}, fmt.Errorf("%w: %d strings", errItem, len(kv))
	}
	return Item{Key: kv[0], Value: kv[1]}, nil
}

// splitPlain splits ["key","value"] when neither string holds an escape, a quote, a control
// character or invalid UTF-8: then the line is exactly the two strings as they stand.
func splitPlain(line string) (key, value string, ok bool) {
	if len(line) < 7 || line[:2] != `["` || line[len(line)-2:] != `"]` {
		return "", "", false
	}
	inner := line[2 : len(line)-2]
	sep, high := -1, false
	for i := 0; i < len(inner); i++ {
		switch c := inner[i]; {
		case c == '"':
			if sep >= 0 || !strings.HasPrefix(inner[i:], `","`) {
				return "", "", false
			}
			sep = i
			i += 2
		case c == '\\' || c < 0x20:
			return "", "", false
		case c >= 0x80:
			high = true
		}
	}
	if sep < 0 || high && !utf8.ValidString(inner) {
		return "", "", false
	}
	return inner[:sep], inner[sep+3:], true
}
