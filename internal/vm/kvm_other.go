//go:build !linux || !amd64

package vm

import (
	"errors"
	"time"
)

func probeKVM(time.Duration) error {
	return errors.New("the KVM probe is written for linux/amd64 only")
}
