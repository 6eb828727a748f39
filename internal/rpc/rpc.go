// Package rpc is the wire contract of the workspace daemon's RPC endpoint, shared by the daemon, its
// clients and the QEMU tests: the request and response envelopes, the stable error codes and their
// HTTP statuses, a strict request decoder, the result types of the built-in actions, and a small
// client.
//
// A request is POST /v1/rpc with {"action": "...", "params": {...}}. A response is
// {"ok": true, "result": ...} or {"ok": false, "error": {"code", "message", "field"}}.
package rpc

import "encoding/json"

// Path is the HTTP path of the RPC endpoint.
const Path = "/v1/rpc"

// ContentType is the media type of requests and responses.
const ContentType = "application/json"

// MaxRequestBytes bounds a request body. Larger bodies are refused with CodeTooLarge.
const MaxRequestBytes = 1 << 20

// MaxResponseBytes bounds the response body a Client reads.
const MaxResponseBytes = 64 << 20

// MaxActionBytes bounds the length of an action name.
const MaxActionBytes = 128

// Request is the body of POST /v1/rpc.
type Request struct {
	Action string `json:"action"`
	// Params is a JSON object; after ParseRequest it is never empty ("{}" when the client sent none).
	Params json.RawMessage `json:"params,omitempty"`
}

// Response is the body of every reply, success or error.
type Response struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}
