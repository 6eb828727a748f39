package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/allox-os/allox/deploy/fleet/internal/payload"
	"github.com/allox-os/allox/internal/attestation"
)

// NoVerify is the trust setting of a rollout whose nodes install without checking who built it.
const NoVerify = payload.NoVerify

// Trust checks, before anything is pushed, that the payload's attestation verifies with the PEM
// public key in keyFile and names every payload file, and returns the key for DaemonSet; keyFile
// NoVerify returns nil (the nodes will not check).
func Trust(ctx context.Context, p *Payload, keyFile string) ([]byte, error) {
	switch keyFile {
	case "":
		return nil, errors.New("no trusted key: pass -verify-key FILE (the PEM public key the nodes require the attestation to be signed with), or -verify-key none")
	case NoVerify:
		return nil, nil
	}
	key, err := attestation.LoadKey(keyFile, false)
	if err != nil {
		return nil, err
	}
	if err := payload.CheckAttestation(ctx, p.Out, p.Files, key); err != nil {
		return nil, fmt.Errorf("%s: %w (sign it: mkimage attest %s --key KEY)", p.Out, err, p.Out)
	}
	return os.ReadFile(keyFile)
}
