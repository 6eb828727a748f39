package scriptedmodel

import "net/http"

// messages plays Anthropic's Messages API, streaming (what Claude Code speaks).
func (s *Server) messages(w http.ResponseWriter, body map[string]any) {
	tools := toolsOf(body, func(m map[string]any) any { return m }, "input_schema")
	turn, result := 1, ""
	for _, msg := range list(body["messages"]) {
		m, _ := msg.(map[string]any)
		for _, c := range list(m["content"]) {
			if cm, _ := c.(map[string]any); cm["type"] == "tool_result" {
				turn, result = 2, text(cm["content"])
			}
		}
	}
	req := Request{API: "messages", Tools: names(tools), Turn: turn, ToolResult: result}
	name, args := s.shellTool(tools)
	var block map[string]any
	stop := "end_turn"
	if turn == 1 && name != "" {
		req.ToolUsed, stop = name, "tool_use"
		block = map[string]any{"type": "tool_use", "id": "toolu_1", "name": name, "input": map[string]any{}}
	} else {
		block = map[string]any{"type": "text", "text": ""}
	}
	s.record(req)
	startSSE(w)
	sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"], "content": []any{},
		"stop_reason": nil, "usage": map[string]any{"input_tokens": 10, "output_tokens": 1}}})
	sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": block})
	if block["type"] == "tool_use" {
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": args}})
	} else {
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": s.script.Final}})
	}
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 10}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}
