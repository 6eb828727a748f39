package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// DecodeParams decodes an action's params into v, a pointer to a struct. Keys must match the
// struct's JSON names exactly (encoding/json alone would accept any letter case); an unknown key,
// a key given twice in one object at any depth (encoding/json would keep the last), a value of
// the wrong type or malformed JSON yields an *Error with CodeInvalidParams whose Field names the
// key ("params.<key>", "params.env.HOME") and whose Choices list the accepted keys. An action
// without params decodes into &struct{}{}.
func DecodeParams(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return Errorf(CodeInvalidParams, "params", "params must be a JSON object: %v", err)
	}
	switch dup, err := duplicateKey(raw); {
	case err != nil:
		return Errorf(CodeInvalidParams, "params", "params do not decode: %v", err)
	case dup != "":
		return Errorf(CodeInvalidParams, "params."+dup, "params.%s is given twice: send each key once", dup)
	}
	if allowed, ok := fieldNames(reflect.TypeOf(v)); ok {
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			if !slices.Contains(allowed, k) {
				return unknownParam(k, allowed)
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		return Errorf(CodeInvalidParams, "params."+te.Field, "params.%s must be %s, not a JSON %s", te.Field, goTypeJSON(te.Type), te.Value)
	default:
		return Errorf(CodeInvalidParams, "params", "params do not decode: %v", err)
	}
}

func unknownParam(key string, allowed []string) *Error {
	e := &Error{Code: CodeInvalidParams, Field: "params." + key, Choices: allowed}
	if len(allowed) == 0 {
		e.Message = fmt.Sprintf("unknown field %q in params: this action takes no params; send {} or leave params out", key)
	} else {
		e.Message = fmt.Sprintf("unknown field %q in params: use one of %s", key, strings.Join(allowed, ", "))
	}
	return e
}

// ParamNames lists the params a params struct (a pointer to one) accepts, sorted; ok is false for
// open types (maps).
func ParamNames(v any) (names []string, ok bool) { return fieldNames(reflect.TypeOf(v)) }

// fieldNames lists the JSON keys a struct (or pointer to one) accepts, sorted. ok is false for types
// whose keys are open (maps, interfaces), which are not checked here.
func fieldNames(t reflect.Type) (names []string, ok bool) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil, false
	}
	names = []string{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case f.Anonymous && name == "":
			inner, ok := fieldNames(f.Type)
			if !ok {
				return nil, false
			}
			names = append(names, inner...)
			continue
		case !f.IsExported():
			continue
		case name == "":
			name = f.Name
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names), true
}

func goTypeJSON(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}
