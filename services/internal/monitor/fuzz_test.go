package monitor

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzReceiver feeds arbitrary bodies to a session's receiver as protobuf and as JSON, on each
// signal's path: it answers 200 or a 4xx, never panics, and stores nothing for a refusal.
func FuzzReceiver(f *testing.F) {
	f.Add([]byte{}, false, 0)
	f.Add(batch(f, 2), false, 0)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x"}]}]}]}`), true, 0)
	f.Add([]byte(`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":{"dataPoints":[{"asInt":"3"}]}}]}]}]}`), true, 1)
	f.Add([]byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"kvlistValue":{"values":[{"key":"k"}]}}}]}]}]}`), true, 2)
	m, err := Open(Config{Root: f.TempDir()}, noTurns{}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	rv := receiver{m: m, key: key{"a", "s"}}
	paths := []string{"/v1/traces", "/v1/metrics", "/v1/logs"}
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool, path int) {
		ct := ctProtobuf
		if asJSON {
			ct = ctJSON
		}
		before, _ := m.journal.read("a", "s")
		req := httptest.NewRequest(http.MethodPost, paths[(path%3+3)%3], bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		w := httptest.NewRecorder()
		rv.ServeHTTP(w, req)
		after, _ := m.journal.read("a", "s")
		switch {
		case w.Code == http.StatusOK:
		case w.Code >= 400 && w.Code < 500:
			if len(after) != len(before) {
				t.Errorf("a refused export (%d) stored %d records", w.Code, len(after)-len(before))
			}
		default:
			t.Errorf("status %d for %q", w.Code, body)
		}
	})
}
