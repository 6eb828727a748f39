package daemon

import (
	"context"
	"errors"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/system"
)

// rpcError maps any error from the HTTP layer, the router or a domain to the wire error. It is the
// only place that decides which domain error becomes which code (and so which HTTP status, see
// rpc.Code.HTTPStatus). Domain errors carry messages that say what to do; they are passed on.
func rpcError(err error) *rpc.Error {
	var re *rpc.Error
	code := rpc.CodeInternal
	switch {
	case errors.As(err, &re):
		return re
	case errors.Is(err, system.ErrNoKernelConfig), errors.Is(err, system.ErrNotUnderInit):
		code = rpc.CodeUnsupported
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		code = rpc.CodeUnavailable
	}
	return &rpc.Error{Code: code, Message: err.Error()}
}
