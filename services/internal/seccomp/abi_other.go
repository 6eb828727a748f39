//go:build !amd64

package seccomp

import "golang.org/x/net/bpf"

var syscallNumbers map[string]int

func abiCheck() ([]bpf.Instruction, error) { return nil, ErrUnsupportedArch }
