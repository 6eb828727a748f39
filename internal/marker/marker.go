// Package marker holds the console lines by which the Go PID 1 tells a watcher (the QEMU tests, the
// bench, a person at the console) how boot is going. init prints them; qemu-tests wait for them.
package marker

import "fmt"

const (
	// BootDone is printed once every boot step has run and every service has been started and,
	// where it has a readiness check, reported ready (or failed it).
	BootDone = "ALLOX-BOOT-DONE"
	// StepFailed prefixes the line printed when a required boot step fails; the VM then powers off.
	StepFailed = "ALLOX-STEP-FAILED"
	// ServiceReady prefixes "ALLOX-SERVICE-READY <name>".
	ServiceReady = "ALLOX-SERVICE-READY"
	// ServiceExited prefixes "ALLOX-SERVICE-EXITED <name> status=<n>".
	ServiceExited = "ALLOX-SERVICE-EXITED"
	// StoreFallback is printed when no workspace disk is attached and a RAM-backed Btrfs is used.
	StoreFallback = "ALLOX-STORE-FALLBACK"
	// PowerOff is printed as the last line before init asks the kernel to power off (or reboot).
	PowerOff = "ALLOX-POWEROFF"
)

// Ready is the line for a service that became ready.
func Ready(service string) string { return fmt.Sprintf("%s %s", ServiceReady, service) }

// Exited is the line for a service that exited.
func Exited(service string, status int) string {
	return fmt.Sprintf("%s %s status=%d", ServiceExited, service, status)
}
