package system

import "fmt"

// CheckPowerOff reports whether PowerOff would reach this guest's init: the daemon must be a child
// of PID 1. Call it before promising a power-off to a client.
func (s *System) CheckPowerOff() error {
	if ppid := s.Getppid(); ppid != 1 {
		return fmt.Errorf("parent is pid %d: %w", ppid, ErrNotUnderInit)
	}
	return nil
}
