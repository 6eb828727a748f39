package fleet_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/allox-os/allox/deploy/fleet"
	"github.com/allox-os/allox/deploy/fleet/internal/fleettest"
)

// trustedPEM is a fixed public key, so the golden file does not change.
const trustedPEM = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAUvOkv+NFlq13rtm8tw4nXbnZ6DZt1ncO7jm8EYU6mSU=\n-----END PUBLIC KEY-----\n"

const pinnedRef = "registry.example:5000/allox/allox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// The rendered manifest is the golden file (regenerate: go test ./deploy/fleet -run DaemonSet -update).
func TestDaemonSetGolden(t *testing.T) {
	got, err := fleet.DaemonSet(fleettest.Out(t, "allox"), "allox", pinnedRef, []byte(trustedPEM))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", fleet.DaemonSetFile)
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs (-want +got; rerun with -update if intended):\n%s", golden, d)
	}
}

// Parsed back as Kubernetes would read it: one object per document, the DaemonSet privileged with
// the host root at /host, the pinned image, cleanup in preStop, NODE_NAME for the label, the RBAC
// to patch nodes, and RuntimeClasses that only schedule onto labelled nodes.
func TestDaemonSetStructure(t *testing.T) {
	data, err := fleet.DaemonSet(fleettest.Out(t, "allox"), "allox", pinnedRef, []byte(trustedPEM))
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string][]map[string]any{}
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var o map[string]any
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			t.Fatalf("document does not parse: %v\n%s", err, doc)
		}
		kind, _ := o["kind"].(string)
		objs[kind] = append(objs[kind], o)
	}
	for kind, n := range map[string]int{"Namespace": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "DaemonSet": 1, "RuntimeClass": 2, "ConfigMap": 1} {
		if len(objs[kind]) != n {
			t.Errorf("%d %s object(s), want %d", len(objs[kind]), kind, n)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	ds := objs["DaemonSet"][0]
	pod := get(t, ds, "spec", "template", "spec").(map[string]any)
	c := get(t, pod, "containers").([]any)[0].(map[string]any)
	checks := []struct {
		what      string
		got, want any
	}{
		{"namespace", get(t, ds, "metadata", "namespace"), fleet.Namespace},
		{"image", c["image"], pinnedRef},
		{"privileged", get(t, c, "securityContext", "privileged"), true},
		{"command", strings.Join(strs(c["command"]), " "), "/allox-deploy install -root=/host -payload=/payload -verify-key=/etc/allox-deploy/trusted.pub"},
		{"trusted key", strings.TrimSpace(get(t, objs["ConfigMap"][0], "data", "trusted.pub").(string)), strings.TrimSpace(trustedPEM)},
		{"trusted key volume", get(t, pod, "volumes").([]any)[1].(map[string]any)["configMap"].(map[string]any)["name"], get(t, objs["ConfigMap"][0], "metadata", "name")},
		{"trusted key mount", get(t, c, "volumeMounts").([]any)[1].(map[string]any)["mountPath"], "/etc/allox-deploy"},
		{"preStop", strings.Join(strs(get(t, c, "lifecycle", "preStop", "exec", "command")), " "), "/allox-deploy cleanup -root=/host -payload=/payload"},
		{"readiness", strings.Join(strs(get(t, c, "readinessProbe", "exec", "command")), " "), "/allox-deploy status -root=/host -payload=/payload"},
		{"mountPath", get(t, c, "volumeMounts").([]any)[0].(map[string]any)["mountPath"], "/host"},
		{"hostPath", get(t, pod, "volumes").([]any)[0].(map[string]any)["hostPath"].(map[string]any)["path"], "/"},
		{"NODE_NAME", get(t, c, "env").([]any)[0].(map[string]any)["valueFrom"].(map[string]any)["fieldRef"].(map[string]any)["fieldPath"], "spec.nodeName"},
		{"serviceAccount", pod["serviceAccountName"], get(t, objs["ServiceAccount"][0], "metadata", "name")},
		{"RBAC", strings.Join(strs(get(t, objs["ClusterRole"][0], "rules").([]any)[0].(map[string]any)["verbs"]), ","), "get,patch"},
	}
	for _, rc := range objs["RuntimeClass"] {
		checks = append(checks, struct {
			what      string
			got, want any
		}{"RuntimeClass " + get(t, rc, "handler").(string) + " nodeSelector", get(t, rc, "scheduling", "nodeSelector", "allox-os.io/allox"), "true"})
	}
	for _, ch := range checks {
		if !cmp.Equal(ch.got, ch.want) {
			t.Errorf("%s: %v, want %v", ch.what, ch.got, ch.want)
		}
	}
}

// Without a trusted key the manifest says so: the nodes install with -verify-key=none.
func TestDaemonSetWithoutKey(t *testing.T) {
	data, err := fleet.DaemonSet(fleettest.Out(t, "allox"), "allox", pinnedRef, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"-payload=/payload", "-verify-key=none"]`)) || bytes.Contains(data, []byte("ConfigMap")) {
		t.Errorf("DaemonSet without a key does not install with -verify-key=none:\n%s", data)
	}
}

// A tag instead of a digest is refused: nodes pulling a moving tag could run different bytes.
func TestDaemonSetNeedsDigest(t *testing.T) {
	if _, err := fleet.DaemonSet(fleettest.Out(t, "allox"), "allox", "registry.example:5000/allox/allox:latest", nil); err == nil || !strings.Contains(err.Error(), "digest-pinned") {
		t.Fatalf("DaemonSet with a tag: %v; want a refusal", err)
	}
}

func get(t *testing.T, o map[string]any, keys ...string) any {
	t.Helper()
	var v any = o
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: not an object above %q", strings.Join(keys, "."), k)
		}
		v = m[k]
	}
	return v
}

func strs(v any) []string {
	var s []string
	for _, x := range v.([]any) {
		s = append(s, x.(string))
	}
	return s
}
