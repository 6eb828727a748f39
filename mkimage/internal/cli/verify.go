package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/mkimage/internal/attest"
	"github.com/allox-os/allox/mkimage/internal/build"
)

// runVerify rechecks an output directory against its manifest; any finding is printed and the exit
// code is 1. With --key it also checks the attestation: its signature by that key and every subject.
func runVerify(ctx context.Context, c Context, args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	keyRef := fs.String("key", "", "also check the attestation with this trusted public key: a PEM file, or env://VAR")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errUsage
	}
	dir := pos[0]
	findings, err := build.Verify(dir)
	if err != nil {
		return err
	}
	for _, f := range findings {
		fmt.Fprintln(c.Stdout, f)
	}
	if len(findings) > 0 {
		fmt.Fprintf(c.Stderr, "mkimage verify: %d artifact(s) of %s disagree with its manifest\n", len(findings), dir)
		return errReported
	}
	if *keyRef == "" {
		fmt.Fprintf(c.Stdout, "verified: every artifact of %s matches its manifest and SBOM\n", dir)
		return nil
	}
	key, err := attestation.LoadKey(*keyRef, false)
	if err != nil {
		return err
	}
	st, err := attest.Verify(ctx, dir, key)
	if err != nil {
		return err
	}
	id, _ := key.KeyID()
	fmt.Fprintf(c.Stdout, "verified: every artifact of %s matches its manifest and SBOM, and the attestation signed by %s (keyid %s) names all %d of them\n",
		dir, *keyRef, id, len(st.GetSubject()))
	return nil
}
