package monitor

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Bounds on one OTLP export request.
const (
	// MaxBodyBytes bounds a request body (after gzip); the OTel SDKs' batches are far smaller.
	MaxBodyBytes = 8 << 20
	// MaxSpans bounds the spans of one trace export (the SDKs' default batch is 512).
	MaxSpans = 8192
)

// OTLP/HTTP content types.
const (
	ctProtobuf = "application/x-protobuf"
	ctJSON     = "application/json"
)

// receiver serves one session's OTLP/HTTP endpoints (/v1/traces, /v1/metrics, /v1/logs): every
// request on it is the session's, whoever sends it.
type receiver struct {
	m   *Monitor
	key key
}

func (rv receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var recs []Record
	var resp, forward proto.Message
	ct, err := rv.decode(w, r, func(body []byte, unmarshal func([]byte, proto.Message) error) error {
		switch r.URL.Path {
		case "/v1/traces":
			var req coltrace.ExportTraceServiceRequest
			if err := unmarshal(body, &req); err != nil {
				return badRequest(http.StatusBadRequest, "the body is not an OTLP ExportTraceServiceRequest: %v", err)
			}
			if n := countSpans(&req); n > MaxSpans {
				return badRequest(http.StatusRequestEntityTooLarge, "the batch has %d spans, more than %d: export smaller batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)", n, MaxSpans)
			}
			recs, resp = fromTraces(&req), &coltrace.ExportTraceServiceResponse{}
		case "/v1/metrics":
			var req colmetrics.ExportMetricsServiceRequest
			if err := unmarshal(body, &req); err != nil {
				return badRequest(http.StatusBadRequest, "the body is not an OTLP ExportMetricsServiceRequest: %v", err)
			}
			recs, resp, forward = fromMetrics(&req), &colmetrics.ExportMetricsServiceResponse{}, &req
		case "/v1/logs":
			var req collogs.ExportLogsServiceRequest
			if err := unmarshal(body, &req); err != nil {
				return badRequest(http.StatusBadRequest, "the body is not an OTLP ExportLogsServiceRequest: %v", err)
			}
			recs, resp, forward = fromLogs(&req), &collogs.ExportLogsServiceResponse{}, &req
		default:
			return badRequest(http.StatusNotFound, "no OTLP endpoint %s: use /v1/traces, /v1/metrics or /v1/logs", r.URL.Path)
		}
		return nil
	})
	if err == nil {
		err = rv.m.ingest(rv.key, SourceOTLP, recs)
	}
	if err != nil {
		writeStatus(w, ct, err)
		return
	}
	if forward != nil && rv.m.cfg.Export != nil {
		rv.m.cfg.Export.Forward(r.URL.Path, rv.key.agent, rv.key.session, forward)
	}
	writeMessage(w, ct, http.StatusOK, resp)
}

// decode checks the method, content type and size and hands the body to f with the matching
// unmarshaller; it returns the content type to answer in.
func (rv receiver) decode(w http.ResponseWriter, r *http.Request, f func([]byte, func([]byte, proto.Message) error) error) (string, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.Method != http.MethodPost {
		return ctJSON, badRequest(http.StatusMethodNotAllowed, "%s %s: OTLP/HTTP takes POST", r.Method, r.URL.Path)
	}
	var unmarshal func([]byte, proto.Message) error
	switch ct {
	case ctProtobuf:
		unmarshal = proto.Unmarshal
	case ctJSON:
		unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal
	default:
		return ctJSON, badRequest(http.StatusUnsupportedMediaType, "Content-Type %q: send application/x-protobuf or application/json (OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf or http/json)", r.Header.Get("Content-Type"))
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return ct, badRequest(http.StatusBadRequest, "Content-Encoding gzip: %v", err)
		}
		body = io.LimitReader(zr, MaxBodyBytes+1)
	default:
		return ct, badRequest(http.StatusUnsupportedMediaType, "Content-Encoding %q: send gzip or none", enc)
	}
	data, err := io.ReadAll(body)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig), err == nil && len(data) > MaxBodyBytes:
		return ct, badRequest(http.StatusRequestEntityTooLarge, "the body is over %d bytes: export smaller batches", MaxBodyBytes)
	case err != nil:
		return ct, badRequest(http.StatusBadRequest, "read the body: %v", err)
	}
	return ct, f(data, unmarshal)
}

// httpError is a refused request: its HTTP status and the reason sent back.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(code int, format string, args ...any) error {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

// writeStatus answers a refused request with a google.rpc.Status in the request's encoding, as
// OTLP/HTTP specifies.
func writeStatus(w http.ResponseWriter, ct string, err error) {
	code, msg := http.StatusInternalServerError, err.Error()
	var he *httpError
	if errors.As(err, &he) {
		code = he.code
	}
	writeMessage(w, ct, code, &status.Status{Code: grpcCode(code), Message: msg})
}

// grpcCode is the Status code of an HTTP status (INVALID_ARGUMENT for a bad request).
func grpcCode(httpCode int) int32 {
	switch httpCode {
	case http.StatusBadRequest, http.StatusUnsupportedMediaType, http.StatusMethodNotAllowed:
		return 3 // INVALID_ARGUMENT
	case http.StatusRequestEntityTooLarge:
		return 8 // RESOURCE_EXHAUSTED
	case http.StatusNotFound:
		return 5 // NOT_FOUND
	}
	return 13 // INTERNAL
}

func writeMessage(w http.ResponseWriter, ct string, code int, m proto.Message) {
	var data []byte
	if ct == ctProtobuf {
		data, _ = proto.Marshal(m)
	} else {
		ct = ctJSON
		data, _ = protojson.Marshal(m)
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(code)
	_, _ = w.Write(data)
}
