// Command system-effects-verify is the protocol 2 verifier: it reads only
// an evidence set directory, judges A→B and writes report.json into it
// (outside the manifest). It prints the report's summary line and exits
//
//	0  evidence COMPLETE and verdict CONSISTENT
//	1  anything else: INCOMPLETE, INCONCLUSIVE or INCONSISTENT
//	2  the verifier could not run (usage, unreadable set, report not written)
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/verdict"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: system-effects-verify EVIDENCE_DIR")
		return 2
	}
	r, err := verdict.Judge(args[0], evidence.ReportFile, verdict.Verify)
	if err != nil {
		fmt.Fprintln(stderr, "system-effects-verify:", err)
		return 2
	}
	fmt.Fprintf(stdout, "{\"evidence\":%q,\"verdict\":%q}\n", r.Evidence, r.Verdict)
	if r.Evidence == verdict.Complete && r.Verdict == verdict.Consistent {
		return 0
	}
	return 1
}
