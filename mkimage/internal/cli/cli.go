// Package cli is mkimage's command line, callable in-process so tests drive it like a user would.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Context is one invocation: arguments and where output goes.
type Context struct {
	Args   []string
	Stdout io.Writer
	Stderr io.Writer
}

type command struct {
	usage string
	help  string
	run   func(ctx context.Context, c Context, args []string) error
}

var commands = map[string]command{
	"build":    {"build [flags] [SPEC]", "build the appliance (the embedded default spec when SPEC is omitted)", runBuild},
	"validate": {"validate SPEC", "decode and check a spec; print every problem at once", runValidate},
	"plan":     {"plan [SPEC]", "print the resolved build plan as JSON", runPlan},
	"kernel-config": {"kernel-config [flags] [SPEC]",
		"configure the kernel, prove every requested option and print the final .config", runKernelConfig},
	"diff":       {"diff DIR1 DIR2", "compare two build outputs (or two files); name where each differing artifact first differs", runDiff},
	"verify":     {"verify DIR [--key PUB]", "recheck every output hash in DIR/manifest.json and the SBOM (with --key, the signed attestation too); name what changed", runVerify},
	"attest":     {"attest DIR --key KEY", "sign the build in DIR: an in-toto statement with SLSA provenance in a DSSE envelope", runAttest},
	"rebuild":    {"rebuild [--key PUB] ATTESTATION", "rebuild exactly what a signed provenance names, in a scratch cache (the kernel from the cache), and compare every output", runRebuild},
	"kata-check": {"kata-check [-out DIR] [SPEC]", "check built artifacts offline against what the Kata runtime expects", runKataCheck},
	"push":       {"push [-out DIR] [-insecure] -verify-key PUB|none REF", "publish the build as a runnable OCI image for the allox-deploy DaemonSet; print its digest-pinned reference", runPush},
}

// errUsage marks errors that are the caller's wording, answered with the usage text.
var errUsage = errors.New("usage")

// errReported means the details were already written (diagnostics); exit non-zero quietly.
var errReported = errors.New("reported")

// Execute runs the command and returns the process exit code.
func (c Context) Execute(ctx context.Context) int {
	if len(c.Args) == 0 || c.Args[0] == "-h" || c.Args[0] == "--help" || c.Args[0] == "help" {
		c.usage(c.Stdout)
		if len(c.Args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[c.Args[0]]
	if !ok {
		fmt.Fprintf(c.Stderr, "mkimage: unknown command %q\n", c.Args[0])
		c.usage(c.Stderr)
		return 2
	}
	err := cmd.run(ctx, c, c.Args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errReported):
		return 1
	case errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(c.Stderr, "usage: mkimage %s\n", cmd.usage)
		return 2
	}
	fmt.Fprintf(c.Stderr, "mkimage %s: %v\n", c.Args[0], err)
	return 1
}

func (c Context) usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: mkimage COMMAND [ARGS]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-32s %s\n", commands[n].usage, commands[n].help)
	}
	io.WriteString(w, b.String())
}
