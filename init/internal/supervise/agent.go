package supervise

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/allox-os/allox/internal/manifest"
)

// AgentPath is where a Kata image has its agent.
const AgentPath = "/usr/bin/kata-agent"

// AgentName is the agent's service name: its cgroup is /sys/fs/cgroup/system/kata-agent, its
// log /run/allox/log/kata-agent.log, its console lines "[kata-agent] ...".
const AgentName = "kata-agent"

// AgentNoFile is LimitNOFILE in Kata 4.1.0's src/agent/kata-agent.service.in.
const AgentNoFile = 1 << 30 // 1073741824

// DefaultAgentRestarts is the restart budget of an agent that is in the image without a
// kata_agent entry in the manifest (an image mkimage did not put it into).
const DefaultAgentRestarts = 3

// AgentService is how init runs the kata-agent, after Kata 4.1.0's kata-agent.service.in and
// kata-containers.target: ExecStart is the binary with no argument; LimitNOFILE=1073741824 (soft
// and hard); OOMScoreAdjust=-997; StandardOutput=tty (here the console, each line prefixed
// "[kata-agent] ", and its log file); FailureAction=poweroff (Critical: when it ends for good init
// powers the VM off). Where Kata's unit powers off at the first failure, init first restarts a
// failed agent (non-zero status or a signal) a.MaxRestarts times per boot, with the supervisor's
// backoff; an agent that exits 0 has finished the sandbox and is not restarted. Its environment is
// every service's (HOME=/ and PATH=DefaultPath, which is systemd's default PATH), and 32 MiB of
// memory.low protect it from the runs' memory pressure.
func AgentService(a manifest.KataAgent) manifest.Service {
	s := manifest.Service{
		Name:        AgentName,
		Command:     []string{a.Path},
		Restart:     manifest.RestartNever,
		OOMScoreAdj: -997,
		NoFile:      AgentNoFile,
		Critical:    true,
		MemoryLow:   32 << 20,
	}
	if a.MaxRestarts > 0 {
		s.Restart, s.MaxRestarts = manifest.RestartOnFailure, a.MaxRestarts
	}
	return s
}

// Agent returns the kata-agent service for m: the manifest's kata_agent, or else an agent found at
// AgentPath under root (with DefaultAgentRestarts). ok is false when there is none, or when a
// manifest service runs AgentPath itself.
func Agent(root string, m *manifest.Manifest) (svc manifest.Service, ok bool, err error) {
	a := m.KataAgent
	for _, s := range m.Services {
		runsAgent := len(s.Command) > 0 && (s.Command[0] == AgentPath || a != nil && s.Command[0] == a.Path)
		switch {
		case runsAgent && a != nil:
			return svc, false, fmt.Errorf("service %q runs the kata-agent, which the manifest's kata_agent runs already: remove one", s.Name)
		case runsAgent:
			return svc, false, nil
		case s.Name == AgentName:
			return svc, false, fmt.Errorf("service %q does not run the kata-agent but has its name: rename the service", s.Name)
		}
	}
	if a != nil {
		return AgentService(*a), true, nil
	}
	if _, err := os.Stat(filepath.Join(root, AgentPath)); err != nil {
		return svc, false, nil
	}
	return AgentService(manifest.KataAgent{Path: AgentPath, MaxRestarts: DefaultAgentRestarts}), true, nil
}
