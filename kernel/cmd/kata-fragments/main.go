// Command kata-fragments writes the list of kernel config symbols that Kata Containers' own guest
// kernel requests, read from a Kata checkout (kernel/kata/*.conf is its committed output):
//
//	go run ./kernel/cmd/kata-fragments -kata /path/to/kata-containers -arch x86_64 -o kernel/kata/kata-4.1.0-x86_64.conf
//
// The Kata version is the checkout's VERSION file.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/allox-os/allox/internal/atomicfile"
	"github.com/allox-os/allox/kernel"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kata-fragments:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kata-fragments", flag.ContinueOnError)
	kata := fs.String("kata", "", "a Kata Containers checkout (its root, holding VERSION and tools/packaging/kernel)")
	arch := fs.String("arch", "x86_64", "Kata's architecture name")
	out := fs.String("o", "", "write the list here instead of standard output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kata == "" || fs.NArg() != 0 {
		return errors.New("usage: kata-fragments -kata KATA_CHECKOUT [-arch x86_64] [-o FILE]")
	}
	version, err := os.ReadFile(filepath.Join(*kata, "VERSION"))
	if err != nil {
		return fmt.Errorf("-kata %s: %w (give the root of a Kata checkout)", *kata, err)
	}
	l, err := kernel.ReadKataFragments(filepath.Join(*kata, "tools/packaging/kernel/configs/fragments"),
		strings.TrimSpace(string(version)), *arch)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	regen := fmt.Sprintf("go run ./kernel/cmd/kata-fragments -kata KATA_CHECKOUT -arch %s -o FILE (make kata-fragments)", *arch)
	if err := kernel.WriteKataList(&buf, l, regen); err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(buf.Bytes())
		return err
	}
	return atomicfile.Write(*out, buf.Bytes(), 0o644)
}
