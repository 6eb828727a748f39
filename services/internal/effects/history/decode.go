package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// maxLine bounds one line of a history: three 255-byte strings, escaped,
// and the fixed fields fit many times over.
const maxLine = 64 << 10

// Decoder reads a history written by a Recorder, one Event per line. It
// rejects unknown fields and trailing data on a line.
type Decoder struct {
	sc   *bufio.Scanner
	line int
}

// NewDecoder returns a Decoder reading from r.
func NewDecoder(r io.Reader) *Decoder {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	return &Decoder{sc: sc}
}

// Next returns the next event, or io.EOF after the last one.
func (d *Decoder) Next() (Event, error) {
	if !d.sc.Scan() {
		if err := d.sc.Err(); err != nil {
			return Event{}, fmt.Errorf("history line %d: %w", d.line+1, err)
		}
		return Event{}, io.EOF
	}
	d.line++
	var ev Event
	dec := json.NewDecoder(bytes.NewReader(d.sc.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		return Event{}, fmt.Errorf("history line %d: %w", d.line, err)
	}
	if dec.More() {
		return Event{}, fmt.Errorf("history line %d: trailing data after the event", d.line)
	}
	return ev, nil
}

// ReadAll decodes every event of a history.
func ReadAll(r io.Reader) ([]Event, error) {
	d := NewDecoder(r)
	var evs []Event
	for {
		ev, err := d.Next()
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}
