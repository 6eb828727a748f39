package vm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// ArtifactsEnv names a directory in which every VM's console log and reproducer are kept, passed
// or failed (CI uploads it). Without it they go to a temporary directory removed when the test
// passes and kept, with its path printed, when it fails.
const ArtifactsEnv = "ALLOX_TEST_ARTIFACTS"

// Files written for each VM.
const (
	ConsoleLog = "console.log" // "<seconds since QEMU start> | <line>"
	StderrLog  = "qemu-stderr.log"
	Reproducer = "boot.sh" // the QEMU command line
)

// outputs are the files kept for one VM.
type outputs struct {
	dir       string
	keep      bool
	consoleF  *os.File
	stderrF   *os.File
	mu        sync.Mutex
	stderrAll []string
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func openOutputs(testName string) (*outputs, error) {
	o := &outputs{}
	var err error
	if root := os.Getenv(ArtifactsEnv); root != "" {
		parent := filepath.Join(root, unsafeName.ReplaceAllString(testName, "_"))
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("%s: %w", ArtifactsEnv, err)
		}
		o.dir, err = os.MkdirTemp(parent, "vm-")
		o.keep = true
	} else {
		o.dir, err = os.MkdirTemp("", "allox-vm-")
	}
	if err != nil {
		return nil, fmt.Errorf("vm output dir: %w", err)
	}
	var e1, e2 error
	o.consoleF, e1 = os.Create(filepath.Join(o.dir, ConsoleLog))
	o.stderrF, e2 = os.Create(filepath.Join(o.dir, StderrLog))
	if err := errors.Join(e1, e2); err != nil {
		o.close()
		o.remove()
		return nil, fmt.Errorf("vm outputs: %w", err)
	}
	return o, nil
}

// writeFwCfg writes each fw_cfg value into a file of the output directory, mode 0600, and
// returns the files by name. QEMU reads them when it starts; they stay for the reproducer.
func (o *outputs) writeFwCfg(values map[string]string) (map[string]string, error) {
	files := map[string]string{}
	for i, name := range sortedKeys(values) {
		p := filepath.Join(o.dir, fmt.Sprintf("fw_cfg-%d", i))
		if err := os.WriteFile(p, []byte(values[name]), 0o600); err != nil {
			return nil, fmt.Errorf("fw_cfg %s: %w", name, err)
		}
		files[name] = p
	}
	return files, nil
}

// writeReproducer writes the script that boots the VM again by hand.
func (o *outputs) writeReproducer(testName, cmdline string) error {
	script := "#!/bin/sh\n# Reproduces a boot of " + testName + "; the console is on stdio, Ctrl-C stops QEMU.\nexec " + cmdline + "\n"
	return os.WriteFile(filepath.Join(o.dir, Reproducer), []byte(script), 0o755)
}

func (o *outputs) console(at time.Duration, text string) {
	fmt.Fprintf(o.consoleF, "%8.3f | %s\n", at.Seconds(), text)
}

func (o *outputs) stderr(text string) {
	o.mu.Lock()
	o.stderrAll = append(o.stderrAll, text)
	o.mu.Unlock()
	fmt.Fprintln(o.stderrF, text)
}

// stderrTail quotes QEMU's last n stderr lines.
func (o *outputs) stderrTail(n int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	lines := o.stderrAll
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return "qemu stderr: (empty)"
	}
	return "qemu stderr:\n  | " + strings.Join(lines, "\n  | ")
}

func (o *outputs) consolePath() string { return filepath.Join(o.dir, ConsoleLog) }

func (o *outputs) close() {
	for _, f := range []*os.File{o.consoleF, o.stderrF} {
		if f != nil {
			f.Close()
		}
	}
}

// remove deletes the files unless ArtifactsEnv asked to keep them.
func (o *outputs) remove() {
	if !o.keep {
		os.RemoveAll(o.dir)
	}
}
