// Package cmdline reads the allox.* parameters from the kernel command line. Everything else on
// the line (Kata's systemd.*, agent.*, console=, ...) is ignored quietly.
package cmdline

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
)

// Prefix is the namespace of the parameters this init understands.
const Prefix = "allox."

// Params are the recognised parameters.
type Params struct {
	// Debug (allox.debug=1, or a bare allox.debug) turns on debug logging.
	Debug bool
	// Unknown lists allox.* parameters this init does not know, so a typo shows up in the log.
	Unknown []string
	// Invalid lists recognised parameters with values that do not parse, with the reason.
	Invalid []string
}

// Parse reads a kernel command line such as /proc/cmdline.
func Parse(r io.Reader) (Params, error) {
	words, err := Split(r)
	if err != nil {
		return Params{}, err
	}
	var p Params
	for _, w := range words {
		key, value, hasValue := strings.Cut(w, "=")
		if !strings.HasPrefix(key, Prefix) {
			continue
		}
		switch key {
		case "allox.debug":
			b, err := boolValue(value, hasValue)
			if err != nil {
				p.Invalid = append(p.Invalid, fmt.Sprintf("%s: %v", w, err))
				continue
			}
			p.Debug = b
		default:
			p.Unknown = append(p.Unknown, key)
		}
	}
	return p, nil
}

func boolValue(v string, present bool) (bool, error) {
	if !present {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("want 1, 0, true or false")
	}
	return b, nil
}

// Split cuts a command line into parameters the way the kernel does: on white space, except
// inside double quotes, which are removed. It stops at "--": the rest belongs to init's argv.
func Split(r io.Reader) ([]string, error) {
	br := bufio.NewReader(r)
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for {
		c, _, err := br.ReadRune()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read command line: %w", err)
		}
		switch {
		case c == '"':
			quoted, inWord = !quoted, true
		case unicode.IsSpace(c) && !quoted:
			if inWord {
				if cur.String() == "--" {
					return words, nil
				}
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	if inWord && cur.String() != "--" {
		words = append(words, cur.String())
	}
	return words, nil
}
