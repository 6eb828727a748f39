// Command system-effects-recovery-verify is the protocol 3 verifier: it
// reads only an evidence set directory, judges A→B (the run's effects), B→C
// (the recovery changed only the Session Workspace) and A→C (everything
// equals A), and writes recovery-report.json into the set (outside the
// manifest). It prints the report's summary line and exits
//
//	0  no fence: the evidence is COMPLETE, B→C CONSISTENT and, with
//	   require_consistent, A→C CONSISTENT
//	1  the session must be fenced (the report's fence_reasons say why)
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
		fmt.Fprintln(stderr, "usage: system-effects-recovery-verify EVIDENCE_DIR")
		return 2
	}
	r, err := verdict.Judge(args[0], evidence.RecoveryReportFile, verdict.VerifyRecovery)
	if err != nil {
		fmt.Fprintln(stderr, "system-effects-recovery-verify:", err)
		return 2
	}
	fmt.Fprintf(stdout, "{\"evidence\":%q,\"verdict\":%q,\"fence\":%t}\n", r.Evidence, r.Verdict, r.Fence)
	if r.Fence {
		return 1
	}
	return 0
}
