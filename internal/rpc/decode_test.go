package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRequest(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
		want *Request
	}{
		{"params object", `{"action":"system.info","params":{"a":1}}`, &Request{Action: "system.info", Params: json.RawMessage(`{"a":1}`)}},
		{"params absent", `{"action":"system.info"}`, &Request{Action: "system.info", Params: json.RawMessage(`{}`)}},
		{"params null", `{"action":"system.info","params":null}`, &Request{Action: "system.info", Params: json.RawMessage(`{}`)}},
		{"whitespace around", " \n\t{ \"params\" : {} , \"action\" : \"a.b\" }\r\n ", &Request{Action: "a.b", Params: json.RawMessage(`{}`)}},
		{"escaped action", `{"action":"system\u002einfo"}`, &Request{Action: "system.info", Params: json.RawMessage(`{}`)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequest([]byte(tt.body))
			if err != nil {
				t.Fatalf("ParseRequest(%s): %v", tt.body, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseRequest(%s) mismatch (-want +got):\n%s", tt.body, diff)
			}
		})
	}
}

func TestParseRequestErrors(t *testing.T) {
	for _, tt := range []struct {
		name      string
		body      string
		code      Code
		field     string
		inMessage string
	}{
		{"empty", ``, CodeInvalidRequest, "", "empty"},
		{"blank", "  \n", CodeInvalidRequest, "", "empty"},
		{"not json", `action=system.info`, CodeInvalidRequest, "", "not valid JSON"},
		{"array", `[{"action":"x"}]`, CodeInvalidRequest, "", "must be a JSON object"},
		{"string", `"system.info"`, CodeInvalidRequest, "", "must be a JSON object"},
		{"truncated", `{"action":"system.info"`, CodeInvalidRequest, "", "ends inside"},
		{"truncated value", `{"action":`, CodeInvalidRequest, "", ""},
		{"missing colon", `{"action" "x"}`, CodeInvalidRequest, "", "not valid JSON"},
		{"trailing object", `{"action":"a.b"}{"action":"c.d"}`, CodeInvalidRequest, "", "trailing data"},
		{"trailing brace", `{"action":"a.b"}}`, CodeInvalidRequest, "", "trailing data"},
		{"trailing garbage", `{"action":"a.b"} x`, CodeInvalidRequest, "", "trailing data"},
		{"unknown envelope field", `{"action":"a.b","agent_id":"x"}`, CodeInvalidRequest, "agent_id", "put arguments inside params"},
		{"wrong case", `{"Action":"a.b"}`, CodeInvalidRequest, "Action", "unknown field"},
		{"duplicate action", `{"action":"a.b","action":"c.d"}`, CodeInvalidRequest, "action", "twice"},
		{"missing action", `{"params":{}}`, CodeInvalidRequest, "action", "missing"},
		{"empty action", `{"action":""}`, CodeInvalidRequest, "action", "missing"},
		{"numeric action", `{"action":7}`, CodeInvalidRequest, "action", "not a number"},
		{"long action", `{"action":"` + strings.Repeat("a", MaxActionBytes+1) + `"}`, CodeInvalidRequest, "action", "at most"},
		{"params array", `{"action":"a.b","params":[]}`, CodeInvalidRequest, "params", "not an array"},
		{"params string", `{"action":"a.b","params":"{}"}`, CodeInvalidRequest, "params", "not a string"},
		{"too large", `{"action":"a.b","params":{"x":"` + strings.Repeat("x", MaxRequestBytes) + `"}}`, CodeTooLarge, "", "exceeds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(tt.body))
			checkError(t, err, tt.code, tt.field, tt.inMessage)
		})
	}
}

func TestDecodeRequestLimit(t *testing.T) {
	body := `{"action":"a.b","params":{"x":"` + strings.Repeat("x", MaxRequestBytes-40) + `"}}`
	if len(body) > MaxRequestBytes {
		t.Fatalf("BUG: test body is %d bytes, over the limit", len(body))
	}
	if _, err := DecodeRequest(strings.NewReader(body)); err != nil {
		t.Errorf("DecodeRequest(%d bytes): %v", len(body), err)
	}
	big := bytes.Repeat([]byte(" "), MaxRequestBytes+1)
	_, err := DecodeRequest(bytes.NewReader(big))
	checkError(t, err, CodeTooLarge, "", "exceeds")
}

func checkError(t *testing.T, err error, code Code, field, inMessage string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want *rpc.Error with code %s", err, err, code)
	}
	if e.Code != code || e.Field != field || !strings.Contains(e.Message, inMessage) {
		t.Errorf("error = {code %q, field %q, message %q}, want code %q, field %q, message containing %q",
			e.Code, e.Field, e.Message, code, field, inMessage)
	}
}
