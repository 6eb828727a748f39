package kernel

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// symbolList is the set of symbols a source tree's Kconfig declares, cached per patched tree so the
// parity proof can check "absent" claims without extracting the source again.
type symbolList map[string]bool

func (s symbolList) Defined(sym string) bool { return s[sym] }

func (b *Builder) symbolsPath(w *workTree) string {
	return filepath.Join(b.CacheDir, "kernel", "kconfig", w.in.tree+".symbols")
}

func (b *Builder) saveSymbols(w *workTree, k *Kconfig) error {
	return atomicWrite(b.symbolsPath(w), []byte(strings.Join(k.Symbols(), "\n")+"\n"))
}

// symbols returns what our source's Kconfig declares: from the cache, or read from the tree
// (extracting it when configuring did not).
func (b *Builder) symbols(ctx context.Context, w *workTree) (symbolList, error) {
	if data, err := os.ReadFile(b.symbolsPath(w)); err == nil {
		set := symbolList{}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			set[sc.Text()] = true
		}
		return set, sc.Err()
	}
	if err := w.prepare(ctx); err != nil {
		return nil, err
	}
	k, err := ReadKconfig(w.dir, "x86")
	if err != nil {
		return nil, err
	}
	if err := b.saveSymbols(w, k); err != nil {
		return nil, err
	}
	set := symbolList{}
	for _, s := range k.Symbols() {
		set[s] = true
	}
	return set, nil
}

// proveParity checks the final config against Kata's list when the spec asks for it.
func (b *Builder) proveParity(ctx context.Context, w *workTree, final []byte) (*ParityReport, error) {
	pin := w.in.parity
	if pin == nil {
		return nil, nil
	}
	settings, err := ParseConfig(bytes.NewReader(final), ".config")
	if err != nil {
		return nil, err
	}
	syms, err := b.symbols(ctx, w)
	if err != nil {
		return nil, fmt.Errorf("kernel parity: read Kconfig symbols: %w", err)
	}
	rep, err := ProveParity(pin.kata, ConfigOf(settings), pin.allow, syms, pin.p.Allowlist)
	if err != nil {
		return nil, err
	}
	b.logf("kernel: parity with %s", rep)
	return rep, nil
}
