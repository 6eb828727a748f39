package kata

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// veritysetup runs Debian's veritysetup (cryptsetup-bin), the reference tool for dm-verity.
func veritysetup(t *testing.T, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath("veritysetup")
	if err != nil {
		path = "/usr/sbin/veritysetup"
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("veritysetup is missing: apt-get install cryptsetup-bin (ci/deps.sh does)")
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// smallImage is a 1 MiB data image of 256 distinct blocks (so a corrupt block cannot match another)
// and its hash tree, formatted the way Kata's image builder does; it returns the paths and
// veritysetup's "Label: value" output.
func smallImage(t *testing.T) (data, hash string, fields map[string]string) {
	t.Helper()
	dir := t.TempDir()
	data, hash = filepath.Join(dir, "data.img"), filepath.Join(dir, "hash.img")
	var buf bytes.Buffer
	for i := range 256 {
		buf.Write(bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xa5, byte(255 - i)}, 1024))
	}
	if err := os.WriteFile(data, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := veritysetup(t, "format", "--no-superblock", "--salt=0123456789abcdef", data, hash)
	if err != nil {
		t.Fatalf("veritysetup format: %v\n%s", err, out)
	}
	fields = map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return data, hash, fields
}

// TestVerityCmdlineMatchesVeritysetup builds a real hash tree with veritysetup, turns the figures it
// printed into kernel_verity_params as Kata's image builder does, and checks that the dm-verity table
// VerityCmdline derives describes that tree: every field equals veritysetup's, and veritysetup itself
// verifies the data against the table's root hash, salt, sizes and hash offset, and refuses it once a
// byte of the data changes.
func TestVerityCmdlineMatchesVeritysetup(t *testing.T) {
	data, hash, f := smallImage(t)
	params := "root_hash=" + f["Root hash"] + ",salt=" + f["Salt"] + ",data_blocks=" + f["Data blocks"] +
		",data_block_size=" + f["Data block size"] + ",hash_block_size=" + f["Hash block size"]
	got, err := VerityCmdline(params, VirtioBlkData, VirtioBlkHash, "ext4")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`dm-mod.create="dm-verity,,,ro,0 2048 verity 1 /dev/vda1 /dev/vda2 4096 4096 256 0 sha256 ` + f["Root hash"] + ` 0123456789abcdef"`,
		"root=/dev/dm-0", "rootflags=data=ordered,errors=remount-ro", "ro", "rootfstype=ext4",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("VerityCmdline (-want +got):\n%s", d)
	}
	// dm-verity table: start len "verity" version data hash dbs hbs blocks hash_start alg root salt.
	table := strings.Fields(strings.TrimSuffix(strings.SplitN(got[0], ",", 5)[4], `"`))
	if len(table) != 13 || table[2] != "verity" || table[3] != "1" {
		t.Fatalf("table %q: want 13 fields of a version-1 verity target", table)
	}
	st, _ := os.Stat(data)
	if table[1] != strconv.FormatInt(st.Size()/512, 10) {
		t.Errorf("table length %s sectors, the data image has %d", table[1], st.Size()/512)
	}
	for i, label := range map[int]string{6: "Data block size", 7: "Hash block size", 8: "Data blocks", 10: "Hash algorithm", 11: "Root hash", 12: "Salt"} {
		if table[i] != f[label] {
			t.Errorf("table field %d = %q, veritysetup's %s is %q", i, table[i], label, f[label])
		}
	}
	verify := func() (string, error) {
		hbs, _ := strconv.Atoi(table[7])
		off, _ := strconv.Atoi(table[9])
		return veritysetup(t, "verify", "--no-superblock", "--format="+table[3], "--hash="+table[10],
			"--data-block-size="+table[6], "--hash-block-size="+table[7], "--data-blocks="+table[8],
			"--hash-offset="+strconv.Itoa(off*hbs), "--salt="+table[12], data, hash, table[11])
	}
	if out, err := verify(); err != nil {
		t.Fatalf("veritysetup verify with the table's parameters: %v\n%s", err, out)
	}
	flipByte(t, data, 77*4096+123)
	if out, err := verify(); err == nil {
		t.Errorf("veritysetup verify accepted the data with a flipped byte in block 77:\n%s", out)
	} else {
		t.Logf("after a flipped byte, veritysetup verify: %v: %s", err, strings.TrimSpace(out))
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestVerityCmdlineDevicesAndTypes(t *testing.T) {
	const p = "root_hash=aa,salt=bb,data_blocks=3,data_block_size=4096,hash_block_size=4096"
	got, err := VerityCmdline(p, NvdimmData, NvdimmHash, "erofs")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`dm-mod.create="dm-verity,,,ro,0 24 verity 1 /dev/pmem0p1 /dev/pmem0p2 4096 4096 3 0 sha256 aa bb"`,
		"root=/dev/dm-0", "rootflags=ro", "rootfstype=erofs"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("NVDIMM erofs (-want +got):\n%s", d)
	}
	for _, tc := range []struct{ name, params, data, hash, fs, want string }{
		{"no salt", "root_hash=aa,salt=,data_blocks=3,data_block_size=4096,hash_block_size=4096", VirtioBlkData, VirtioBlkHash, "ext4", "salt"},
		{"missing field", "root_hash=aa,salt=bb", VirtioBlkData, VirtioBlkHash, "ext4", "data_blocks is missing"},
		{"same device", p, VirtioBlkData, VirtioBlkData, "ext4", "two different block devices"},
		{"unknown fs", p, VirtioBlkData, VirtioBlkHash, "btrfs", `rootfs_type "btrfs"`},
	} {
		if _, err := VerityCmdline(tc.params, tc.data, tc.hash, tc.fs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
