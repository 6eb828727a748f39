package history

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

type taskStatus struct {
	tgid, ppid int
	comm       string
}

// procStatus reads a thread's process id, parent and name from procfs,
// for the syscalls still running at Stop (the kernel record has only the
// thread id).
func procStatus(tid int) (taskStatus, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return taskStatus{}, err
	}
	defer f.Close()
	var st taskStatus
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "Name":
			st.comm = v
		case "Tgid":
			st.tgid, _ = strconv.Atoi(v)
		case "PPid":
			st.ppid, _ = strconv.Atoi(v)
		}
	}
	return st, sc.Err()
}
