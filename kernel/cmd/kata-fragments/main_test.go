package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/kernel"
)

func TestWritesAListThatParses(t *testing.T) {
	out := filepath.Join(t.TempDir(), "list.conf")
	if err := run([]string{"-kata", "../../testdata/kata", "-o", out}, nil); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	l, err := kernel.ParseKataList(bytes.NewReader(data), out)
	if err != nil {
		t.Fatal(err)
	}
	if l.Version != "9.9.9" || l.Arch != "x86_64" || len(l.Settings) != 5 {
		t.Errorf("list: Kata %s %s with %d symbols, want 9.9.9 x86_64 with 5", l.Version, l.Arch, len(l.Settings))
	}
}

func TestNotACheckout(t *testing.T) {
	err := run([]string{"-kata", t.TempDir()}, nil)
	if err == nil || !strings.Contains(err.Error(), "give the root of a Kata checkout") {
		t.Fatalf("error = %v, want it to say what -kata must name", err)
	}
}
