package daemon

import (
	"context"
	"errors"
	"syscall"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/fence"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/system"
	"github.com/allox-os/allox/services/internal/tracked"
	"github.com/allox-os/allox/services/internal/tracker"
	"github.com/allox-os/allox/services/internal/workspace"
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
	case errors.Is(err, system.ErrNoKernelConfig), errors.Is(err, system.ErrNotUnderInit), errors.Is(err, tracker.ErrUnsupported):
		code = rpc.CodeUnsupported
	case errors.Is(err, store.ErrInvalidID), errors.Is(err, store.ErrInvalidLabel), errors.Is(err, tracked.ErrInvalid), errors.Is(err, tracker.ErrInvalid),
		errors.Is(err, workspace.ErrInvalidLimits):
		code = rpc.CodeInvalidParams
	case errors.Is(err, store.ErrQuarantined):
		code = rpc.CodeQuarantined
	case errors.Is(err, store.ErrNotFound), errors.Is(err, tracked.ErrNotFound), errors.Is(err, tracker.ErrNotFound):
		code = rpc.CodeNotFound
	case errors.Is(err, store.ErrExists), errors.Is(err, store.ErrPinned), errors.Is(err, store.ErrConflict),
		errors.Is(err, fence.ErrFenced), errors.Is(err, workspace.ErrBusy):
		code = rpc.CodeConflict
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		code = rpc.CodeUnavailable
	case errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.ENOSPC):
		code = rpc.CodeNoSpace
	}
	out := &rpc.Error{Code: code, Message: err.Error()}
	if code == rpc.CodeNoSpace {
		out.Message += ": the session's, the agent's or the store's space is used up; free some with checkpoint.delete, session.delete or agent.delete (these work on a full store)"
	}
	var se *store.Error
	var te *tracked.InvalidError
	var ke *tracker.InvalidError
	var le *workspace.LimitError
	switch {
	case errors.As(err, &se) && se.Field != "":
		out.Field = "params." + se.Field
	case errors.As(err, &te) && te.Field != "":
		out.Field = "params." + te.Field
	case errors.As(err, &ke) && ke.Field != "":
		out.Field = "params." + ke.Field
	case errors.As(err, &le):
		out.Field = "params." + le.Field
	}
	return out
}
