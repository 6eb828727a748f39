package main

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// setNice sets the nice value of every thread of the process: Linux keeps it per thread, and a
// thread started later inherits its creator's. A standby observer prepares at the lowest
// priority, so that it takes only CPU time nothing else wants, and returns to the normal one when
// its run begins. Errors are ignored: the priority changes how soon, never what, it computes.
func setNice(n int) {
	for range 2 { // again, for a thread the runtime started meanwhile
		tids, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return
		}
		for _, t := range tids {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				_ = unix.Setpriority(unix.PRIO_PROCESS, tid, n)
			}
		}
	}
}
