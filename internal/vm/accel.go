package vm

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// AccelEnv forces the accelerator ("kvm" or "tcg") instead of probing /dev/kvm.
const AccelEnv = "ALLOX_ACCEL"

var accel = sync.OnceValues(chooseAccel)

// Accel is the accelerator the VMs of this process use: "kvm" when /dev/kvm really runs a guest
// at hardware speed, "tcg" (software emulation) otherwise. The answer is probed once and cached.
func Accel() string { a, _ := accel(); return a }

// AccelReason says why Accel chose what it did, for logs and skip messages.
func AccelReason() string { _, why := accel(); return why }

// TimeoutScale is the factor by which boot timeouts grow under Accel(): 1 for KVM, 8 for TCG.
func TimeoutScale() int { return scaleFor(Accel()) }

// Scaled is d × TimeoutScale().
func Scaled(d time.Duration) time.Duration { return d * time.Duration(TimeoutScale()) }

func scaleFor(accel string) int {
	if accel == "kvm" {
		return 1
	}
	return 8
}

func chooseAccel() (string, string) {
	switch v := os.Getenv(AccelEnv); v {
	case "kvm", "tcg":
		return v, fmt.Sprintf("forced by %s=%s", AccelEnv, v)
	case "":
	default:
		return "tcg", fmt.Sprintf("%s=%q is neither kvm nor tcg; using tcg", AccelEnv, v)
	}
	if err := probeKVM(probeDeadline); err != nil {
		return "tcg", fmt.Sprintf("KVM does not work: %v; using TCG (set %s=kvm to force)", err, AccelEnv)
	}
	return "kvm", "KVM probe ran a guest loop at hardware speed"
}

// probeDeadline bounds the KVM probe: a working KVM runs its loop in about a millisecond; a
// /dev/kvm that traps every instruction (seen on broken nested setups, where a Linux boot never
// finishes) takes over a second.
const probeDeadline = 250 * time.Millisecond
