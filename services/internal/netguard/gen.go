package netguard

// The generated netguard_bpfel.go and netguard_bpfel.o are committed, so a
// build needs no clang. Regenerating needs clang and llvm-strip (Debian 12:
// clang 14, llvm 14) and libbpf-dev for <bpf/bpf_helpers.h>; the output is
// byte-identical for the same compiler.
//
//go:generate go tool bpf2go -tags linux -target bpfel netguard bpf/netguard.bpf.c -- -I./bpf -Wall -Werror
