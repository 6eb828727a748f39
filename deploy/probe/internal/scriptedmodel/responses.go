package scriptedmodel

import "net/http"

// responses plays the OpenAI Responses API, streaming (what codex speaks).
func (s *Server) responses(w http.ResponseWriter, body map[string]any) {
	tools := toolsOf(body, func(m map[string]any) any { return m }, "parameters")
	turn, result := 1, ""
	for _, it := range list(body["input"]) {
		if m, _ := it.(map[string]any); m["type"] == "function_call_output" || m["type"] == "custom_tool_call_output" {
			turn, result = 2, text(m["output"])
		}
	}
	req := Request{API: "responses", Tools: names(tools), Turn: turn, ToolResult: result}
	var item map[string]any
	if name, args := s.shellTool(tools); turn == 1 && name != "" {
		req.ToolUsed = name
		item = map[string]any{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": name, "arguments": args, "status": "completed"}
	} else {
		item = map[string]any{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": s.script.Final, "annotations": []any{}}}}
	}
	s.record(req)
	startSSE(w)
	resp := map[string]any{"id": "resp_" + string(rune('0'+turn)), "object": "response", "status": "in_progress", "output": []any{}}
	sse(w, "response.created", map[string]any{"type": "response.created", "response": resp})
	sse(w, "response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	if item["type"] == "message" {
		sse(w, "response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": s.script.Final})
	}
	sse(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	resp["status"], resp["output"] = "completed", []any{item}
	resp["usage"] = map[string]any{"input_tokens": 10, "output_tokens": 10, "total_tokens": 20,
		"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	sse(w, "response.completed", map[string]any{"type": "response.completed", "response": resp})
}
