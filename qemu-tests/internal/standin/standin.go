// Package standin is the contract of the stand-in kata-agent (./kata-agent), a small static Go
// program that the tests put into an image where the real agent belongs.
//
// The real kata-agent is Rust; its crates cannot be fetched here and no release binary can be
// downloaded, so it can be neither built nor obtained. The stand-in proves the packaging and
// supervision contract only: that mkimage puts an executable at /usr/bin/kata-agent and records
// its `--version`, and that init starts it with the arguments, environment, cgroup, open-file
// limit and oom_score_adj of Kata's unit, restarts it after a crash within the budget and then
// powers the VM off. It speaks no ttRPC, listens on no vsock port and creates no container:
// nothing here shows that a Kata runtime can drive the real agent in this guest.
package standin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"
)

// Version is what `kata-agent --version` prints, in the real agent's form.
const Version = "kata-agent version 0.0.0-allox-standin (api version: 0.0.0, commit version: none, type: go stand-in, extra-features: [])"

// Marker starts the console line on which the stand-in prints its Report at every start.
const Marker = "ALLOX-STANDIN-AGENT "

// Port is the guest TCP port the stand-in listens on (the real agent's ttRPC port is vsock 1024;
// this guest has no vhost-vsock). A line "report" gets the Report back, "crash" makes the
// stand-in answer "crashing" and SIGKILL itself.
const Port = 1024

// Report is what the stand-in got from init.
type Report struct {
	Argv        []string `json:"argv"`
	Env         []string `json:"env"`
	Cgroup      string   `json:"cgroup"` // /proc/self/cgroup, e.g. "0::/system/kata-agent"
	NoFileCur   uint64   `json:"nofile_cur"`
	NoFileMax   uint64   `json:"nofile_max"`
	OOMScoreAdj string   `json:"oom_score_adj"`
	PID         int      `json:"pid"`
	PPID        int      `json:"ppid"`
	// ContainerControllers is cgroup.controllers of a cgroup the stand-in made beside its own at
	// the root (as the agent makes the containers' cgroups from their cgroupsPath), or the error.
	ContainerControllers string `json:"container_controllers"`
}

// ParseLine reads a Report from a console line holding Marker (after init's "[kata-agent] ").
func ParseLine(line string) (Report, bool) {
	_, js, ok := strings.Cut(line, Marker)
	if !ok {
		return Report{}, false
	}
	var r Report
	return r, json.Unmarshal([]byte(js), &r) == nil
}

// Ask sends one command to the stand-in at addr (the host end of the forwarded Port) and returns
// its one-line answer.
func Ask(addr, command string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintln(c, command); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: %w (got %q)", command, err, line)
	}
	return strings.TrimSpace(line), nil
}

// Fetch asks the stand-in at addr for its Report.
func Fetch(addr string) (Report, error) {
	line, err := Ask(addr, "report")
	if err != nil {
		return Report{}, err
	}
	var r Report
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return Report{}, fmt.Errorf("report %q: %w", line, err)
	}
	return r, nil
}
