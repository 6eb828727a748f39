package spec

import "fmt"

// validateAgent checks the kata block's agent block and require_agent, and that no service runs
// an agent beside it.
func (d *decoder) validateAgent(k *Kata, services []Service) {
	a := k.Agent
	for i, s := range services {
		if a != nil && (s.Name == "kata-agent" || len(s.Command) > 0 && s.Command[0] == AgentPath) {
			d.errorf(fmt.Sprintf("service.%d", i), "A service runs the kata-agent",
				"Service %q runs or is named after the kata-agent, which init runs itself from the kata.agent block: remove the service, or the agent block.", s.Name)
		}
	}
	if a == nil {
		if k.RequireAgent {
			d.errorf("kata.require_agent", "No kata-agent for a Kata image",
				"kata.require_agent is true but no kata.agent block puts an agent at %s: a Kata runtime waits 45 s for it and gives up. "+
					"Add agent { binary = \"/opt/kata/bin/kata-agent\" } (the one of your Kata release) or "+
					"agent { from_image = \"/opt/kata/share/kata-containers/kata-containers.img\" } to the kata block, or set require_agent = false.",
				AgentPath)
		}
		return
	}
	switch {
	case a.Binary == "" && a.FromImage == "" && !d.suppressed("kata.agent.binary") && !d.suppressed("kata.agent.from_image"):
		d.errorf("kata.agent", "No source for the kata-agent",
			"The agent block needs exactly one of binary (a kata-agent executable, e.g. \"/opt/kata/bin/kata-agent\") "+
				"and from_image (a Kata guest image, e.g. \"/opt/kata/share/kata-containers/kata-containers.img\").")
	case a.Binary != "" && a.FromImage != "":
		d.errorf("kata.agent.from_image", "Two sources for the kata-agent",
			"The agent block sets both binary and from_image; keep one: binary for an executable, from_image to take %s out of a Kata guest image.",
			AgentPath)
	}
	if a.MaxRestarts < 0 || a.MaxRestarts > MaxAgentRestarts {
		d.errorf("kata.agent.max_restarts", "Invalid restart budget",
			"max_restarts must be 0 (power off at the first failure, as Kata's own unit does) to %d; got %d. The default is %d.",
			MaxAgentRestarts, a.MaxRestarts, DefaultAgentRestarts)
	}
}
