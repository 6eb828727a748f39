package cgroup

import (
	"fmt"
	"strconv"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// Usage is what a group has used over its life, from its stat files: each figure is 0 when the
// group lacks the controller that counts it (a hybrid host's v2 tree has no cpu, memory, io or
// pids controllers; cpu.stat's usage is counted without one).
type Usage struct {
	CPUUsec    uint64 `json:"cpu_usec"` // cpu.stat usage_usec: user and system
	UserUsec   uint64 `json:"user_usec"`
	SystemUsec uint64 `json:"system_usec"`
	MemoryPeak uint64 `json:"memory_peak_bytes"` // memory.peak
	IORead     uint64 `json:"io_read_bytes"`     // io.stat rbytes, all devices
	IOWrite    uint64 `json:"io_write_bytes"`    // io.stat wbytes
	PidsPeak   uint64 `json:"pids_peak"`         // pids.peak: the most processes at once
}

// Usage reads the group's usage with the library's Stat (cpu, memory, io); pids.peak, which the
// library does not read, by hand.
func (g *Group) Usage() (Usage, error) {
	m, err := g.m.StatFiltered(cgroup2.StatCPU | cgroup2.StatMemory | cgroup2.StatIO)
	if err != nil {
		return Usage{}, fmt.Errorf("cgroup %s: stats: %w", g.dir, err)
	}
	var u Usage
	if c := m.GetCPU(); c != nil {
		u.CPUUsec, u.UserUsec, u.SystemUsec = c.GetUsageUsec(), c.GetUserUsec(), c.GetSystemUsec()
	}
	u.MemoryPeak = m.GetMemory().GetMaxUsage()
	for _, e := range m.GetIo().GetUsage() {
		u.IORead += e.GetRbytes()
		u.IOWrite += e.GetWbytes()
	}
	if s, err := g.Read("pids.peak"); err == nil {
		u.PidsPeak, _ = strconv.ParseUint(s, 10, 64)
	}
	return u, nil
}
