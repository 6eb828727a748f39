package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/allox-os/allox/internal/manifest"
)

// AgentPath is where a Kata image has its agent.
const AgentPath = "/usr/bin/kata-agent"

// Agent is the service init adds for a kata-agent the manifest does not run itself: what Kata's
// systemd unit gives it (LimitNOFILE=1048576, oom_score_adj -997, FailureAction=poweroff), and
// 32 MiB of memory.low, so that the runs' memory pressure reclaims elsewhere first.
var Agent = manifest.Service{
	Name:        "kata-agent",
	Command:     []string{AgentPath},
	Restart:     manifest.RestartNever,
	OOMScoreAdj: -997,
	NoFile:      1048576,
	Critical:    true,
	MemoryLow:   32 << 20,
}

// WithAgent appends Agent to services (in start order) when root holds AgentPath and no service
// already runs it. added says whether it did.
func WithAgent(root string, services []manifest.Service) (out []manifest.Service, added bool, err error) {
	if _, err := os.Stat(filepath.Join(root, AgentPath)); err != nil {
		return services, false, nil
	}
	for _, s := range services {
		if len(s.Command) > 0 && s.Command[0] == AgentPath {
			return services, false, nil
		}
		if s.Name == Agent.Name {
			return services, false, fmt.Errorf("service %q does not run %s, which is present: rename the service or run the agent in it", s.Name, AgentPath)
		}
	}
	return append(slices.Clone(services), Agent), true, nil
}
