package rpc

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
)

func TestErrorIs(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &Error{Code: CodeNotFound, Message: "no such agent"})
	if !errors.Is(err, CodeNotFound) {
		t.Error("errors.Is(err, CodeNotFound) = false")
	}
	if !errors.Is(err, &Error{Code: CodeNotFound}) {
		t.Error("errors.Is(err, &Error{Code: CodeNotFound}) = false")
	}
	if errors.Is(err, CodeConflict) || errors.Is(err, &Error{Code: CodeConflict}) {
		t.Error("errors.Is matched a different code")
	}
}

func TestHTTPStatus(t *testing.T) {
	for code, want := range map[Code]int{
		CodeInvalidRequest: http.StatusBadRequest, CodeInvalidParams: http.StatusBadRequest,
		CodeTooLarge: http.StatusRequestEntityTooLarge, CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
		CodeMethodNotAllowed: http.StatusMethodNotAllowed, CodeUnknownAction: http.StatusNotFound,
		CodeUnauthorized: http.StatusUnauthorized, CodeForbidden: http.StatusForbidden,
		CodeNotFound: http.StatusNotFound, CodeConflict: http.StatusConflict,
		CodeUnsupported: http.StatusNotImplemented, CodeUnavailable: http.StatusServiceUnavailable,
		CodeNoSpace:  http.StatusInsufficientStorage,
		CodeInternal: http.StatusInternalServerError, Code("from_the_future"): http.StatusInternalServerError,
	} {
		if got := code.HTTPStatus(); got != want {
			t.Errorf("%s.HTTPStatus() = %d, want %d", code, got, want)
		}
	}
}
