package kata

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseKernelVerityParams(t *testing.T) {
	want := KernelVerity{
		RootHash:      "3f1c2a9d0b6e4f5a8c7d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b",
		Salt:          "00ff10ee",
		DataBlocks:    65536,
		DataBlockSize: 4096,
		HashBlockSize: 4096,
	}
	got, err := ParseKernelVerityParams(testVerity)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parsed (-want +got):\n%s", diff)
	}
	if got.String() != testVerity {
		t.Errorf("String() = %q, want the input %q back", got.String(), testVerity)
	}
	reordered := "hash_block_size=4096,data_block_size=4096,data_blocks=65536,salt=00ff10ee,root_hash=" + want.RootHash
	if again, err := ParseKernelVerityParams(reordered); err != nil || again != want {
		t.Errorf("reordered: got %+v, %v; want %+v", again, err, want)
	}
}

func TestParseKernelVerityParamsErrors(t *testing.T) {
	base := "root_hash=ab,salt=cd,data_blocks=8,data_block_size=4096,hash_block_size=4096"
	for _, tt := range []struct{ in, want string }{
		{"", `field "" has no '='`},
		{strings.Replace(base, "root_hash=ab", "root_hash=", 1), "root_hash=\"\": is empty"},
		{strings.Replace(base, "root_hash=ab", "root_hash=abc", 1), "odd number of hex digits"},
		{strings.Replace(base, "salt=cd", "salt=xy", 1), "hex digits only"},
		{strings.Replace(base, "data_blocks=8", "data_blocks=0", 1), "data_blocks=\"0\": is 0"},
		{strings.Replace(base, "data_blocks=8", "data_blocks=-1", 1), "data_blocks=\"-1\""},
		{strings.Replace(base, "data_block_size=4096", "data_block_size=1000", 1), "power of two from 512 to 4096"},
		{strings.Replace(base, "hash_block_size=4096", "hash_block_size=8192", 1), "power of two"},
		{base + ",salt=cd", "salt is given twice"},
		{base + ",offset=0", `unknown key "offset"`},
		{"root_hash=ab", "salt is missing"},
		{strings.Replace(base, "salt=cd", "salt=", 1), `salt="": is empty`}, // Kata: "missing kernel_verity_params salt"
	} {
		_, err := ParseKernelVerityParams(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseKernelVerityParams(%q) = %v, want an error containing %q", tt.in, err, tt.want)
		}
	}
}
