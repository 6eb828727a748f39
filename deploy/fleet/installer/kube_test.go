package installer_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/deploy/fleet/installer"
)

// The label is a JSON merge patch on the pod's own node, with the service account's token: set to
// "true" on install, null (removed) on cleanup. A stand-in API server records the requests (no
// cluster runs here); a refusal names the node and the RBAC to check.
func TestNodeLabeler(t *testing.T) {
	type request struct{ Method, Path, Type, Auth, Body string }
	var got []request
	status := http.StatusOK
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = append(got, request{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), string(body)})
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"kind": "Status", "message": "nodes is forbidden"})
	}))
	defer srv.Close()
	l := &installer.NodeLabeler{API: srv.URL, Node: "node-1", Token: "t0ken", Client: srv.Client()}
	ctx := context.Background()
	if err := l.Label(ctx, installer.NodeLabel("allox"), true); err != nil {
		t.Fatal(err)
	}
	if err := l.Label(ctx, installer.NodeLabel("allox"), false); err != nil {
		t.Fatal(err)
	}
	want := []request{
		{"PATCH", "/api/v1/nodes/node-1", "application/merge-patch+json", "Bearer t0ken", `{"metadata":{"labels":{"allox-os.io/allox":"true"}}}`},
		{"PATCH", "/api/v1/nodes/node-1", "application/merge-patch+json", "Bearer t0ken", `{"metadata":{"labels":{"allox-os.io/allox":null}}}`},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("requests (-want +got):\n%s", d)
	}
	status = http.StatusForbidden
	err := l.Label(ctx, installer.NodeLabel("allox"), true)
	if err == nil || !strings.Contains(err.Error(), "node-1") || !strings.Contains(err.Error(), "ClusterRole") {
		t.Errorf("a 403: %v; want an error naming the node and the RBAC", err)
	}
}
