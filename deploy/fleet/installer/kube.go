package installer

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
)

// serviceAccountDir is where Kubernetes mounts a pod's service account token and CA.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// NodeLabeler patches one node's labels through the Kubernetes API (a JSON merge patch on
// /api/v1/nodes/NAME), as kata-deploy labels the nodes it installed.
type NodeLabeler struct {
	API    string // https://host:port
	Node   string
	Token  string
	Client *http.Client
}

// InClusterLabeler returns a labeler for the pod's own node from its service account and
// NODE_NAME (the DaemonSet sets it from spec.nodeName); nil outside a cluster.
func InClusterLabeler() (*NodeLabeler, error) {
	host, port, node := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"), os.Getenv("NODE_NAME")
	if host == "" || port == "" {
		return nil, nil
	}
	if node == "" {
		return nil, fmt.Errorf("NODE_NAME is not set: give the container env NODE_NAME from fieldRef spec.nodeName, or pass -label-node=false")
	}
	token, err := os.ReadFile(filepath.Join(serviceAccountDir, "token"))
	if err != nil {
		return nil, fmt.Errorf("service account token: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(serviceAccountDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("service account CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("service account CA %s: no PEM certificate", filepath.Join(serviceAccountDir, "ca.crt"))
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return &NodeLabeler{API: "https://" + net.JoinHostPort(host, port), Node: node, Token: string(bytes.TrimSpace(token)), Client: client}, nil
}

// Label sets key=true on the node, or removes it.
func (l *NodeLabeler) Label(ctx context.Context, key string, set bool) error {
	var value any
	if set {
		value = "true"
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: value}}})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, l.API+"/api/v1/nodes/"+url.PathEscape(l.Node), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/merge-patch+json")
	req.Header.Set("Authorization", "Bearer "+l.Token)
	resp, err := l.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("PATCH node %s: %s: %s (does the service account's ClusterRole allow patch on nodes?)", l.Node, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
