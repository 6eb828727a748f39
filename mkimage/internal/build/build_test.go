package build

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/allox-os/allox/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/manifest"
	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/mkimage/internal/spec"
)

// buildDefault runs the real pipeline on images/allox.hcl into a fresh output directory. The
// kernel must already be in the cache (make image builds it): compiling it here would take half an
// hour.
func buildDefault(t *testing.T) (string, *Result) {
	t.Helper()
	root, _ := filepath.Abs("../../..")
	out := t.TempDir()
	res, _ := buildDefaultInto(t, root, out)
	return out, res
}

// buildDefaultInto builds images/allox.hcl into out from the Go sources in moduleRoot, returning
// the result and the progress the build printed.
func buildDefaultInto(t *testing.T, moduleRoot, out string) (*Result, string) {
	t.Helper()
	return buildDefaultWith(t, moduleRoot, out, artifact.CacheDir())
}

func buildDefaultWith(t *testing.T, moduleRoot, out, cacheDir string) (*Result, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the whole image pipeline; run without -short")
	}
	root, _ := filepath.Abs("../../..")
	text, err := os.ReadFile(filepath.Join(root, "images", "allox.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	img, diags := spec.Parse(filepath.Join(root, "images", "allox.hcl"), text, filepath.Join(root, "images"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	b := &kernel.Builder{CacheDir: artifact.CacheDir()}
	if _, ok := b.Cached(KernelSpec(img, 0, 0)); !ok {
		testenv.Unavailable(t, "the default kernel is not in the cache %s: run make image first (make test builds it before the tests)", artifact.CacheDir())
	}
	img.Output.Dir = out
	var progress bytes.Buffer
	res, err := Run(context.Background(), Options{Spec: img, SpecText: text, ModuleRoot: moduleRoot,
		CacheDir: cacheDir, Progress: &progress})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, progress.String())
	}
	if !res.Kernel.Cached {
		t.Error("the kernel was rebuilt although it was cached")
	}
	for _, st := range stages {
		if !strings.Contains(progress.String(), "    "+st.name+" in ") {
			t.Errorf("progress does not time stage %q:\n%s", st.name, progress.String())
		}
	}
	return res, progress.String()
}

func tool(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func TestDefaultImageArtifacts(t *testing.T) {
	out, _ := buildDefault(t)
	img := filepath.Join(out, artifact.Rootfs)

	// The partition table Kata expects: MBR, one Linux partition at 1 MiB, or at 3 MiB in MBR #1
	// behind the NVDIMM DAX header (the default spec has kata.nvdimm = true).
	info, err := artifact.ReadBootInfo(out)
	if err != nil {
		t.Fatal(err)
	}
	startMiB := 1
	if info.Nvdimm {
		startMiB = 3
	}
	table := tool(t, "sfdisk", "-d", img)
	for _, want := range []string{"label: dos", fmt.Sprintf("start=%12d", startMiB*2048), "type=83"} {
		if !strings.Contains(table, want) {
			t.Errorf("sfdisk -d lacks %q:\n%s", want, table)
		}
	}
	if n := strings.Count(table, img+"1"); n != 1 || strings.Contains(table, img+"2") {
		t.Errorf("want exactly one partition:\n%s", table)
	}

	// The filesystem in partition 1 is clean and holds what Kata and init need.
	part := filepath.Join(t.TempDir(), "p1.ext4")
	tool(t, "dd", "if="+img, "of="+part, "bs=1M", fmt.Sprintf("skip=%d", startMiB), "status=none", "conv=sparse")
	tool(t, "e2fsck", "-fn", part)
	stat := tool(t, "debugfs", "-R", "stat /usr/sbin/init", part)
	if !strings.Contains(stat, "Type: regular") || !strings.Contains(stat, "Mode:  0755") {
		t.Errorf("/sbin/init is not a 0755 regular file:\n%s", stat)
	}
	if s := tool(t, "debugfs", "-R", "stat /etc/resolv.conf", part); !strings.Contains(s, "Type: regular") || !strings.Contains(s, "Size: 0") {
		t.Errorf("/etc/resolv.conf must be an empty regular file:\n%s", s)
	}
	if s := tool(t, "debugfs", "-R", "stat /var/lib/allox/workspaces", part); !strings.Contains(s, "Type: directory") {
		t.Errorf("the store mountpoint is missing from the read-only root:\n%s", s)
	}
	m, err := manifest.Decode(strings.NewReader(tool(t, "debugfs", "-R", "cat "+manifest.Path, part)))
	if err != nil {
		t.Fatalf("service manifest in the image: %v", err)
	}
	if len(m.Services) != 1 || m.Services[0].Command[0] != "/usr/bin/allox-workspace-daemon" {
		t.Errorf("unexpected services in the manifest: %+v", m.Services)
	}

	// The initramfs holds the same userland with /init and a console node.
	listing := tool(t, "sh", "-c", "gzip -dc "+filepath.Join(out, artifact.Initramfs)+" | cpio -t --quiet")
	for _, want := range []string{"init", "dev/console", "etc/allox/manifest.json", "usr/bin/allox-workspace-daemon", "usr/bin/bwrap", "usr/sbin/init"} {
		if !containsLine(listing, want) {
			t.Errorf("cpio -t lacks %s", want)
		}
	}
	checkProvenance(t, out)
	checkKata(t, out)
}

func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

func checkProvenance(t *testing.T, out string) {
	data, err := os.ReadFile(filepath.Join(out, artifact.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	var p Provenance
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, in := range p.Inputs {
		kinds[in.Kind]++
	}
	for kind, min := range map[string]int{"spec": 1, "fragment": 12, "kernel-source": 1, "debian-userland": 1, "go-binary": 2, "patch": 1, "allowlist": 1} {
		if kinds[kind] < min {
			t.Errorf("provenance has %d %s input(s), want at least %d", kinds[kind], kind, min)
		}
	}
	if len(p.Packages) < 4 {
		t.Errorf("provenance lists %d Debian packages", len(p.Packages))
	}
	seen := map[string]bool{}
	for _, o := range p.Outputs {
		seen[o.Path] = true
		sum, err := kernel.HashFile(filepath.Join(out, o.Path))
		if err != nil || sum != o.SHA256 {
			t.Errorf("output %s: manifest says %s, file hashes to %s (%v)", o.Path, o.SHA256, sum, err)
		}
	}
	for _, name := range []string{artifact.Kernel, artifact.Vmlinux, artifact.KernelConfig, artifact.Rootfs, artifact.Initramfs, artifact.Boot} {
		if !seen[name] {
			t.Errorf("provenance does not hash output %s", name)
		}
	}
}

func checkKata(t *testing.T, out string) {
	for _, name := range []string{"config.d/50-allox.toml", "runtime-rs/config.d/50-allox.toml"} {
		var cfg struct {
			Hypervisor map[string]map[string]any `toml:"hypervisor"`
		}
		if _, err := toml.DecodeFile(filepath.Join(out, artifact.KataDir, name), &cfg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		q := cfg.Hypervisor["qemu"]
		release, err := kata.ReleaseOf(filepath.Join(out, artifact.Kernel), filepath.Join(out, artifact.Rootfs))
		if err != nil {
			t.Fatal(err)
		}
		dir := "/opt/allox/allox/" + release
		if q["kernel"] != dir+"/bzImage" || q["image"] != dir+"/rootfs.img" || q["initrd"] != "" {
			t.Errorf("%s: unexpected assets (want them in the release directory %s): %v", name, dir, q)
		}
		if !strings.Contains(q["kernel_params"].(string), "cgroup_no_v1=all") {
			t.Errorf("%s: kernel_params %v", name, q["kernel_params"])
		}
	}
}

func TestRebuildIsByteIdentical(t *testing.T) {
	out1, _ := buildDefault(t)
	out2, _ := buildDefault(t)
	for _, name := range []string{artifact.Rootfs, artifact.Initramfs, artifact.Kernel, artifact.Boot} {
		a, _ := kernel.HashFile(filepath.Join(out1, name))
		b, _ := kernel.HashFile(filepath.Join(out2, name))
		if a == "" || a != b {
			t.Errorf("%s differs between two builds of the same spec: %s vs %s", name, a, b)
		}
	}
}
