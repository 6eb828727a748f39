package supervise

import "time"

// Kind says what happened to a service.
type Kind string

const (
	Started     Kind = "started"      // a process runs (PID)
	StartFailed Kind = "start-failed" // the process could not be started (Err); Exited follows with 127
	Ready       Kind = "ready"        // the readiness check passed, once per boot
	NotReady    Kind = "not-ready"    // the readiness check timed out (Err)
	Exited      Kind = "exited"       // the process ended (Status)
	Restarting  Kind = "restarting"   // it starts again after Delay
	Done        Kind = "done"         // it ended for good (Status); Critical says the VM must go down
	Warning     Kind = "warning"      // something short of failure (Err)
)

// Event is what the supervisor reports; init logs it and prints the boot markers from it.
type Event struct {
	Service  string
	Kind     Kind
	PID      int
	Status   int
	Delay    time.Duration
	Critical bool
	Err      error
}
