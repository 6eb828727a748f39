package evidence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/allox-os/allox/services/internal/effects/jsonbytes"
)

// A snapshot file is JSON Lines: the first line is the snapshot without its items
// ({"format":2,"domain":…,"point":…,…,"items":N}), then one line per item, [key,value], N of
// them, each string in its jsonbytes form: a JSON string when it is valid UTF-8, else
// {"base64":"…"}. A workspace of 10,000 files is 10,000 short lines; written and read line by
// line this is several times faster than one JSON document decoded by reflection, and `jq -c .`
// still reads it.

// snapshotHead is a snapshot file's first line.
type snapshotHead struct {
	Format        int                `json:"format"`
	Domain        string             `json:"domain"`
	Point         string             `json:"point"`
	Unconfirmable jsonbytes.String   `json:"unconfirmable,omitempty"`
	Note          jsonbytes.String   `json:"note,omitempty"`
	Excluded      []jsonbytes.String `json:"excluded,omitempty"`
	Items         int                `json:"items"`
}

// encodeSnapshot renders s as a snapshot file.
func encodeSnapshot(s *Snapshot) ([]byte, error) {
	h := snapshotHead{Format: Format, Domain: s.Domain, Point: s.Point, Unconfirmable: jsonbytes.String(s.Unconfirmable),
		Note: jsonbytes.String(s.Note), Items: len(s.Items)}
	for _, x := range s.Excluded {
		h.Excluded = append(h.Excluded, jsonbytes.String(x))
	}
	head, err := json.Marshal(h)
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
		b = jsonbytes.Append(b, it.Key)
		b = append(b, ',')
		b = jsonbytes.Append(b, it.Value)
		b = append(b, "]\n"...)
	}
	return b, nil
}

// decodeSnapshot parses a snapshot file, refusing another format, unknown fields, a malformed
// line and a count of items that does not match the first line.
func decodeSnapshot(b []byte) (*Snapshot, error) {
	first, _, _ := bytes.Cut(b, []byte{'\n'})
	if err := checkFormat(first); err != nil {
		return nil, fmt.Errorf("line 1: %w", err)
	}
	var h snapshotHead
	dec := json.NewDecoder(bytes.NewReader(first))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("line 1: %w", err)
	}
	if h.Items < 0 {
		return nil, fmt.Errorf("line 1: items %d", h.Items)
	}
	s := &Snapshot{Domain: h.Domain, Point: h.Point, Unconfirmable: string(h.Unconfirmable), Note: string(h.Note),
		Items: make([]Item, 0, h.Items)}
	for _, x := range h.Excluded {
		s.Excluded = append(s.Excluded, string(x))
	}
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

var errItem = errors.New(`an item is one line [key,value]`)

// decodeItem parses one item line. A line of valid UTF-8 without escapes is split where it
// stands; any other goes through encoding/json and jsonbytes.
func decodeItem(line string) (Item, error) {
	if k, v, ok := splitPlain(line); ok {
		return Item{Key: k, Value: v}, nil
	}
	var kv []jsonbytes.String
	if err := json.Unmarshal([]byte(line), &kv); err != nil {
		return Item{}, fmt.Errorf("%w: %w", errItem, err)
	}
	if len(kv) != 2 {
		return Item{}, fmt.Errorf("%w: %d strings", errItem, len(kv))
	}
	return Item{Key: string(kv[0]), Value: string(kv[1])}, nil
}

// splitPlain splits ["key","value"] when neither string holds an escape, a quote, a control
// character or invalid UTF-8: then the line is exactly the two strings as they stand, which is
// their jsonbytes form.
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
