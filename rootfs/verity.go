package rootfs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/allox-os/allox/deploy/kata"
)

// Verity block geometry: veritysetup's defaults, which Kata's image builder uses (it passes only
// --no-superblock). With 4 KiB blocks and sha256, one hash block holds 128 hashes.
const (
	verityBlockSize = 4096
	verityHashSize  = 32
	verityFanout    = verityBlockSize / verityHashSize
	verityAlgorithm = "sha256"
)

// VerityParams describe a dm-verity hash tree: everything the kernel's verity target needs besides
// the two devices.
type VerityParams struct {
	RootHash      string // hex
	Salt          string // hex
	DataBlocks    uint64
	DataBlockSize uint64
	HashBlockSize uint64
	// HashBytes is the size of the hash tree written to the hash image (hash offset 0, no superblock).
	HashBytes int64
}

// String renders p as Kata's kernel_verity_params (deploy/kata owns the format):
// root_hash=<hex>,salt=<hex>,data_blocks=<n>,data_block_size=<n>,hash_block_size=<n>.
func (p VerityParams) String() string {
	return kata.KernelVerity{RootHash: p.RootHash, Salt: p.Salt, DataBlocks: p.DataBlocks,
		DataBlockSize: uint32(p.DataBlockSize), HashBlockSize: uint32(p.HashBlockSize)}.String()
}

// FormatVerity writes the dm-verity hash tree of dataImage (a regular file, a whole number of 4 KiB
// blocks) to hashImage with Debian's veritysetup, as Kata's image builder does: format 1, sha256,
// 4 KiB blocks, no superblock (Kata's runtimes put hash offset 0 in the table). The salt must be
// fixed by the caller (derived from the image, never random) so that the tree is reproducible. It
// needs neither root nor loop devices.
func FormatVerity(ctx context.Context, dataImage, hashImage string, salt []byte) (VerityParams, error) {
	if len(salt) == 0 || len(salt) > 256 {
		return VerityParams{}, fmt.Errorf("verity salt: %d bytes, want 1 to 256 (e.g. a sha256 of the spec); Kata's runtime refuses an empty salt", len(salt))
	}
	st, err := os.Stat(dataImage)
	if err != nil {
		return VerityParams{}, fmt.Errorf("verity data image: %w", err)
	}
	if st.Size() == 0 || st.Size()%verityBlockSize != 0 {
		return VerityParams{}, fmt.Errorf("verity data image %s: %d bytes, want a non-zero multiple of %d", dataImage, st.Size(), verityBlockSize)
	}
	tool, err := lookTool("veritysetup")
	if err != nil {
		return VerityParams{}, errors.New("veritysetup not found: apt-get install cryptsetup-bin")
	}
	if err := os.WriteFile(hashImage, nil, 0o644); err != nil {
		return VerityParams{}, fmt.Errorf("verity hash image: %w", err)
	}
	bs := strconv.Itoa(verityBlockSize)
	cmd := exec.CommandContext(ctx, tool, "format", "--no-superblock", "--format=1", "--hash="+verityAlgorithm,
		"--data-block-size="+bs, "--hash-block-size="+bs, "--salt="+hex.EncodeToString(salt), dataImage, hashImage)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return VerityParams{}, fmt.Errorf("veritysetup format %s: %w\n%s", dataImage, err, bytes.TrimSpace(stderr.Bytes()))
	}
	p, err := parseVerityFormat(out)
	if err != nil {
		return VerityParams{}, err
	}
	if err := p.check(st.Size(), salt); err != nil {
		return VerityParams{}, err
	}
	return p, nil
}

// check compares what veritysetup reports with what was asked of it and with verityHashBytes, on
// which the disk layout relies.
func (p VerityParams) check(dataBytes int64, salt []byte) error {
	want := VerityParams{RootHash: p.RootHash, Salt: hex.EncodeToString(salt), DataBlocks: uint64(dataBytes / verityBlockSize),
		DataBlockSize: verityBlockSize, HashBlockSize: verityBlockSize, HashBytes: verityHashBytes(dataBytes)}
	if p != want || len(p.RootHash) != 2*verityHashSize {
		return fmt.Errorf("BUG: veritysetup reported %+v, want %+v", p, want)
	}
	return nil
}

// parseVerityFormat reads the "Label: value" lines veritysetup format prints, as Kata's
// build_kernel_verity_params does.
func parseVerityFormat(out []byte) (VerityParams, error) {
	fields := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		label, value, ok := strings.Cut(sc.Text(), ":")
		if ok {
			fields[strings.TrimSpace(label)] = strings.TrimSpace(value)
		}
	}
	var p VerityParams
	var errs []error
	str := func(label string, dst *string) {
		if *dst = fields[label]; *dst == "" {
			errs = append(errs, fmt.Errorf("no %q line", label))
		}
	}
	num := func(label string, dst *uint64) {
		var s string
		str(label, &s)
		if n, err := strconv.ParseUint(strings.Fields(s + " x")[0], 10, 64); err == nil {
			*dst = n
		} else if s != "" {
			errs = append(errs, fmt.Errorf("%q: %q is not a number", label, s))
		}
	}
	var hashBytes uint64
	str("Root hash", &p.RootHash)
	str("Salt", &p.Salt)
	num("Data blocks", &p.DataBlocks)
	num("Data block size", &p.DataBlockSize)
	num("Hash block size", &p.HashBlockSize)
	num("Hash device size", &hashBytes)
	p.HashBytes = int64(hashBytes)
	if err := errors.Join(errs...); err != nil {
		return VerityParams{}, fmt.Errorf("veritysetup format output: %w\n%s", err, out)
	}
	return p, nil
}

// verityHashBytes is the size of the hash tree veritysetup writes for dataBytes of data (format 1,
// 4 KiB blocks, sha256, no superblock): one level of hash blocks per 128-fold reduction, down to the
// single block whose hash is the root hash.
func verityHashBytes(dataBytes int64) int64 {
	var blocks int64
	for n := (dataBytes + verityBlockSize - 1) / verityBlockSize; n > 1; {
		n = (n + verityFanout - 1) / verityFanout
		blocks += n
	}
	return blocks * verityBlockSize
}
