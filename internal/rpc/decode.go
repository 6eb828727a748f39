package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// DecodeRequest reads at most MaxRequestBytes from r and parses them with ParseRequest.
// Every error it returns is an *Error.
func DecodeRequest(r io.Reader) (*Request, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxRequestBytes+1))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig) || len(data) > MaxRequestBytes:
		return nil, Errorf(CodeTooLarge, "", "the request body exceeds %d bytes: send smaller params", MaxRequestBytes)
	case err != nil:
		return nil, Errorf(CodeInvalidRequest, "", "read request body: %v", err)
	}
	return ParseRequest(data)
}

// ParseRequest parses one request envelope. It is strict: the body must be exactly one JSON object
// whose keys are "action" (a non-empty string) and optionally "params" (an object or null), each at
// most once and spelled exactly so, followed by nothing but whitespace. Absent or null params
// become "{}". Every error it returns is an *Error with CodeInvalidRequest or CodeTooLarge.
func ParseRequest(data []byte) (*Request, error) {
	if len(data) > MaxRequestBytes {
		return nil, Errorf(CodeTooLarge, "", "the request body exceeds %d bytes: send smaller params", MaxRequestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	switch {
	case errors.Is(err, io.EOF):
		return nil, Errorf(CodeInvalidRequest, "", "the body is empty: send %s", example)
	case err != nil:
		return nil, syntaxError(err)
	case tok != json.Delim('{'):
		return nil, Errorf(CodeInvalidRequest, "", "the body must be a JSON object: %s", example)
	}
	var req Request
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(err)
		}
		key, _ := tok.(string) // inside an object, Token returns keys as strings
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, syntaxError(err)
		}
		if seen[key] {
			return nil, Errorf(CodeInvalidRequest, key, "the request names %q twice: send it once", key)
		}
		seen[key] = true
		if err := req.set(key, raw); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, syntaxError(err)
	}
	if rest := bytes.Trim(data[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, Errorf(CodeInvalidRequest, "", "trailing data after the JSON object at byte %d: send one object per request", dec.InputOffset())
	}
	return &req, req.validate()
}

func (req *Request) set(key string, raw json.RawMessage) error {
	switch key {
	case "action":
		if err := json.Unmarshal(raw, &req.Action); err != nil {
			return Errorf(CodeInvalidRequest, "action", "action must be a string such as \"system.info\", not %s", jsonKind(raw))
		}
	case "params":
		if k := jsonKind(raw); k != "object" && k != "null" {
			return Errorf(CodeInvalidRequest, "params", "params must be a JSON object (or left out), not %s", k)
		}
		req.Params = raw
	default:
		return &Error{Code: CodeInvalidRequest, Field: key, Choices: []string{"action", "params"},
			Message: fmt.Sprintf("unknown field %q in the request: the envelope has only \"action\" and \"params\"; put arguments inside params", key)}
	}
	return nil
}

func (req *Request) validate() error {
	switch {
	case req.Action == "":
		return Errorf(CodeInvalidRequest, "action", "action is missing or empty: name one, e.g. \"system.info\"")
	case len(req.Action) > MaxActionBytes:
		return Errorf(CodeInvalidRequest, "action", "action is %d bytes long; action names are at most %d", len(req.Action), MaxActionBytes)
	}
	if jsonKind(req.Params) != "object" {
		req.Params = json.RawMessage("{}")
	}
	return nil
}

// jsonKind names the JSON type of a valid JSON value by its first byte.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

const example = `{"action": "system.info", "params": {}}`

func syntaxError(err error) *Error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return Errorf(CodeInvalidRequest, "", "the body is not valid JSON (byte %d: %v): send %s", se.Offset, se, example)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(CodeInvalidRequest, "", "the body ends inside the JSON object: send the whole object")
	default:
		return Errorf(CodeInvalidRequest, "", "the body is not valid JSON (%v): send %s", err, example)
	}
}
