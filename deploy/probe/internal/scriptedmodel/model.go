// Package scriptedmodel is a stand-in for a model vendor's service: an HTTP endpoint that speaks
// the wire formats the agents' CLIs speak (OpenAI Responses and Chat Completions, Anthropic
// Messages, each streaming) and plays one scripted task. The first turn asks to run Command
// through whichever shell tool the CLI offered; the turn after a tool result ends the task with
// Final. Only the vendor is fake: the CLI, its tool execution and the sandbox are real.
package scriptedmodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// Script is the task the model plays.
type Script struct {
	Command string // the shell command the model asks to run
	Final   string // the answer after the command's result came back
	// Escalate asks to run Command outside the CLI's own sandbox where its tool offers that
	// (codex's sandbox_permissions "require_escalated"), which a CLI asking on request asks
	// its user about.
	Escalate bool
}

// Server is the endpoint; mount it with http.Server or httptest.
type Server struct {
	script Script
	mu     sync.Mutex
	log    []Request
}

// Request is what one call asked, for tests.
type Request struct {
	API      string   // "responses", "chat" or "messages"
	Tools    []string // the tool names the CLI offered
	Turn     int      // 1: asked to run the command; 2: answered with Final
	ToolUsed string
	// ToolResult is what the CLI sent back from the tool (its first 2000 bytes), on turn 2.
	ToolResult string
}

func New(s Script) *Server { return &Server{script: s} }

// Requests returns every call so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	s.log = append(s.log, r)
	s.mu.Unlock()
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&body) != nil {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
			fmt.Fprint(w, `{"object":"list","data":[{"id":"scripted","object":"model"}]}`)
			return
		}
		http.Error(w, "scripted model: POST a JSON body", http.StatusBadRequest)
		return
	}
	switch {
	case strings.HasSuffix(r.URL.Path, "/responses"):
		s.responses(w, body)
	case strings.HasSuffix(r.URL.Path, "/chat/completions"):
		s.chat(w, body)
	case strings.HasSuffix(r.URL.Path, "/messages"):
		s.messages(w, body)
	default:
		http.Error(w, "scripted model: no such API "+r.URL.Path, http.StatusNotFound)
	}
}

// shellTool picks the tool that runs a shell command among the offered ones and the arguments
// that run s.script.Command through it.
func (s *Server) shellTool(tools []tool) (name string, args string) {
	for _, pref := range []string{"exec_command", "shell_command", "shell", "bash", "Bash"} {
		for _, t := range tools {
			if t.Name != pref {
				continue
			}
			props, _ := t.Params["properties"].(map[string]any)
			a := map[string]any{}
			switch {
			case props["cmd"] != nil:
				a["cmd"] = s.script.Command
			case isArray(props["command"]):
				a["command"] = []string{"sh", "-c", s.script.Command}
			default:
				a["command"] = s.script.Command
			}
			if props["yield_time_ms"] != nil { // codex: wait for the command rather than leave it running
				a["yield_time_ms"] = 60000
			}
			if props["timeout"] != nil && props["yield_time_ms"] == nil {
				a["timeout"] = 120000
			}
			if s.script.Escalate && props["sandbox_permissions"] != nil {
				a["sandbox_permissions"] = "require_escalated"
				if props["justification"] != nil {
					a["justification"] = "the task writes a file in the workspace"
				}
			}
			if props["description"] != nil {
				a["description"] = "run the scripted command"
			}
			b, _ := json.Marshal(a)
			return t.Name, string(b)
		}
	}
	return "", ""
}

func isArray(p any) bool {
	m, _ := p.(map[string]any)
	return m != nil && m["type"] == "array"
}

type tool struct {
	Name   string
	Params map[string]any
}

// toolsOf reads the request's tools: def picks each one's definition (the tool itself, or its
// "function"), which has a name and its JSON schema under schemaKey.
func toolsOf(body map[string]any, def func(map[string]any) any, schemaKey string) []tool {
	var tools []tool
	for _, t := range list(body["tools"]) {
		m, _ := t.(map[string]any)
		d, _ := def(m).(map[string]any)
		name, _ := d["name"].(string)
		params, _ := d[schemaKey].(map[string]any)
		if name != "" {
			tools = append(tools, tool{name, params})
		}
	}
	return tools
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// text renders a tool result's content (a string, or a list of text parts) for Request.ToolResult.
func text(v any) string {
	var s string
	switch c := v.(type) {
	case string:
		s = c
	case []any:
		for _, p := range c {
			if m, _ := p.(map[string]any); m != nil {
				t, _ := m["text"].(string)
				s += t
			}
		}
	default:
		b, _ := json.Marshal(v)
		s = string(b)
	}
	if len(s) > 2000 {
		s = s[:2000]
	}
	return s
}

func names(ts []tool) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

// sse writes one server-sent event and flushes it.
func sse(w http.ResponseWriter, event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}
