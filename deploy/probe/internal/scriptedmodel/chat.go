package scriptedmodel

import "net/http"

// chat plays OpenAI's Chat Completions API, streaming (what opencode's OpenAI-compatible
// provider speaks).
func (s *Server) chat(w http.ResponseWriter, body map[string]any) {
	tools := toolsOf(body, func(m map[string]any) any { return m["function"] }, "parameters")
	turn, result := 1, ""
	for _, msg := range list(body["messages"]) {
		if m, _ := msg.(map[string]any); m["role"] == "tool" {
			turn, result = 2, text(m["content"])
		}
	}
	req := Request{API: "chat", Tools: names(tools), Turn: turn, ToolResult: result}
	name, args := s.shellTool(tools)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	startSSE(w)
	if turn == 1 && name != "" {
		req.ToolUsed = name
		sse(w, "", chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": "call_1", "type": "function",
			"function": map[string]any{"name": name, "arguments": args}}}}, nil))
		sse(w, "", chunk(map[string]any{}, "tool_calls"))
	} else {
		sse(w, "", chunk(map[string]any{"role": "assistant", "content": s.script.Final}, nil))
		sse(w, "", chunk(map[string]any{}, "stop"))
	}
	s.record(req)
	w.Write([]byte("data: [DONE]\n\n"))
}
