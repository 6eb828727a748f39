package rpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// maxParamsDepth bounds how deeply params may nest (encoding/json refuses deeper values too).
const maxParamsDepth = 1000

// duplicateKey returns the path below params ("env.HOME", "argv[2].x") of the first key that
// appears twice in one object of raw, a valid JSON value, at any depth, or "" when there is none.
// Keys are compared after unescaping, so "a" and "\u0061" are the same key, as encoding/json
// (which silently keeps the last one) sees them.
func duplicateKey(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return walkDuplicates(dec, "", 0)
}

func walkDuplicates(dec *json.Decoder, path string, depth int) (string, error) {
	if depth > maxParamsDepth {
		return "", fmt.Errorf("params nest deeper than %d levels", maxParamsDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", err
			}
			k, _ := kt.(string) // inside an object, Token returns keys as strings
			p := k
			if path != "" {
				p = path + "." + k
			}
			if seen[k] {
				return p, nil
			}
			seen[k] = true
			if dup, err := walkDuplicates(dec, p, depth+1); dup != "" || err != nil {
				return dup, err
			}
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if dup, err := walkDuplicates(dec, path+"["+strconv.Itoa(i)+"]", depth+1); dup != "" || err != nil {
				return dup, err
			}
		}
	default:
		return "", nil
	}
	_, err = dec.Token() // the closing delimiter
	return "", err
}
