package rpc

import (
	"fmt"
	"net/http"
)

// Code is a stable, machine-readable error code. Clients branch on it, never on messages.
// A Code is also an error, so that errors.Is(err, rpc.CodeForbidden) tests a returned *Error.
type Code string

// The error codes. New codes may be added; existing ones keep their meaning and HTTP status.
const (
	CodeInvalidRequest       Code = "invalid_request"        // the envelope is malformed
	CodeTooLarge             Code = "request_too_large"      // the body exceeds MaxRequestBytes
	CodeUnsupportedMediaType Code = "unsupported_media_type" // Content-Type is not application/json
	CodeMethodNotAllowed     Code = "method_not_allowed"     // not a POST
	CodeUnknownAction        Code = "unknown_action"         // no handler for the action; Choices lists the known ones
	CodeInvalidParams        Code = "invalid_params"         // params do not fit the action; Field names the culprit
	CodeUnauthorized         Code = "unauthorized"           // missing or wrong bearer token
	CodeForbidden            Code = "forbidden"              // the action is not allowed on this listener
	CodeNotFound             Code = "not_found"              // the named object (or endpoint) does not exist
	CodeConflict             Code = "conflict"               // the object's state does not allow the action now
	CodeQuarantined          Code = "quarantined"            // the session's recovery failed; only session.delete is served for it
	CodeNoSpace              Code = "no_space"               // the session's, agent's or store's space is used up; free some with a delete
	CodeUnsupported          Code = "unsupported"            // this guest (kernel, build) cannot do it
	CodeUnavailable          Code = "unavailable"            // the daemon is shutting down or the request was cancelled
	CodeUnreachable          Code = "unreachable"            // the destination could not be reached (the network broker could not connect)
	CodeInternal             Code = "internal"               // a bug or an unexpected system failure
)

// Error implements error, so that a Code can be used as an errors.Is target.
func (c Code) Error() string { return string(c) }

// HTTPStatus is the HTTP status a reply with this code carries. Unknown codes map to 500.
func (c Code) HTTPStatus() int {
	switch c {
	case CodeInvalidRequest, CodeInvalidParams:
		return http.StatusBadRequest
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeUnknownAction, CodeNotFound:
		return http.StatusNotFound
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeQuarantined, CodeConflict:
		return http.StatusConflict
	case CodeNoSpace:
		return http.StatusInsufficientStorage
	case CodeUnsupported:
		return http.StatusNotImplemented
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeUnreachable:
		return http.StatusBadGateway
	default:
		return http.StatusInternalServerError
	}
}

// Error is the error object of a failed call.
type Error struct {
	Code Code `json:"code"`
	// Message says what went wrong and what to do about it.
	Message string `json:"message"`
	// Field names the offending part of the request, e.g. "action" or "params.agent_id".
	Field string `json:"field,omitempty"`
	// Choices lists the accepted values when there is a fixed set (the known actions, the allowed
	// params fields).
	Choices []string `json:"choices,omitempty"`
	// Status is the HTTP status the reply arrived with; set by Client, never sent.
	Status int `json:"-"`
}

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s (field %s)", e.Code, e.Message, e.Field)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is reports whether target is an *Error or a Code with the same code.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case Code:
		return e.Code == t
	case *Error:
		return t != nil && e.Code == t.Code
	}
	return false
}
