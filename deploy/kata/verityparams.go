package kata

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// verityParamKeys are the fields of kernel_verity_params, in the order Kata's tools write them
// (root_hash, salt, data_blocks, data_block_size, hash_block_size).
var verityParamKeys = []string{"root_hash", "salt", "data_blocks", "data_block_size", "hash_block_size"}

// KernelVerity is a parsed kernel_verity_params value: the dm-verity table Kata puts on the kernel
// command line for the image.
type KernelVerity struct {
	RootHash      string // hex
	Salt          string // hex
	DataBlocks    uint64
	DataBlockSize uint32
	HashBlockSize uint32
}

// String renders v in Kata's kernel_verity_params form.
func (v KernelVerity) String() string {
	return fmt.Sprintf("root_hash=%s,salt=%s,data_blocks=%d,data_block_size=%d,hash_block_size=%d",
		v.RootHash, v.Salt, v.DataBlocks, v.DataBlockSize, v.HashBlockSize)
}

// ParseKernelVerityParams parses s, of the form
// root_hash=<hex>,salt=<hex>,data_blocks=<n>,data_block_size=<n>,hash_block_size=<n> (every key
// exactly once, in any order), as Kata's runtimes accept it (both refuse an empty root hash or salt
// and zero counts; block sizes must be multiples of 512).
func ParseKernelVerityParams(s string) (KernelVerity, error) {
	var v KernelVerity
	seen := map[string]bool{}
	var errs []error
	for _, field := range strings.Split(s, ",") {
		key, value, ok := strings.Cut(field, "=")
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("field %q has no '=': write key=value", field))
			continue
		case seen[key]:
			errs = append(errs, fmt.Errorf("%s is given twice: keep one", key))
			continue
		}
		seen[key] = true
		if err := v.set(key, value); err != nil {
			errs = append(errs, err)
		}
	}
	for _, k := range verityParamKeys {
		if !seen[k] {
			errs = append(errs, fmt.Errorf("%s is missing: add %s=<value> (veritysetup format prints it)", k, k))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return KernelVerity{}, err
	}
	return v, nil
}

func (v *KernelVerity) set(key, value string) error {
	var err error
	switch key {
	case "root_hash":
		v.RootHash, err = verityHex(value)
	case "salt":
		v.Salt, err = verityHex(value) // Kata refuses an empty salt too
	case "data_blocks":
		v.DataBlocks, err = strconv.ParseUint(value, 10, 64)
		if err == nil && v.DataBlocks == 0 {
			err = errors.New("is 0: give the number of data blocks the hash tree covers")
		}
	case "data_block_size":
		v.DataBlockSize, err = verityBlockSize(value)
	case "hash_block_size":
		v.HashBlockSize, err = verityBlockSize(value)
	default:
		return fmt.Errorf("unknown key %q: the keys are %s", key, strings.Join(verityParamKeys, ", "))
	}
	if err != nil {
		return fmt.Errorf("%s=%q: %w", key, value, err)
	}
	return nil
}

// verityHex accepts a non-empty, even-length hex string.
func verityHex(s string) (string, error) {
	if s == "" {
		return "", errors.New("is empty: give the hex digest veritysetup printed")
	}
	if len(s)%2 != 0 {
		return "", errors.New("has an odd number of hex digits")
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return "", fmt.Errorf("contains %q: use hex digits only", r)
		}
	}
	return s, nil
}

// verityBlockSize accepts a power of two from 512 to 4096 (dm-verity's limits on a 4 KiB-page guest).
func verityBlockSize(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, errors.New("is not a decimal number")
	}
	if n < 512 || n > 4096 || n&(n-1) != 0 {
		return 0, errors.New("must be a power of two from 512 to 4096, e.g. 4096")
	}
	return uint32(n), nil
}
