package spec

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// flags are the daemon flags the session_network block renders.
func (n *SessionNetwork) flags() []string {
	if n == nil {
		return nil
	}
	out := []string{"--session-network=" + n.Default}
	if n.Modes != nil {
		out = append(out, "--session-network-modes="+strings.Join(n.Modes, ","))
	}
	if n.Policy != "" {
		out = append(out, "--session-network-policy="+n.Policy)
	}
	return out
}

// validateSessionNetwork checks the session_network block at key of service s: known modes, each
// once, the default among them, an absolute policy path, and the plugin installed when a mode
// needs it.
func (d *decoder) validateSessionNetwork(key string, s Service) {
	n := s.Sandbox.SessionNetwork
	if n == nil {
		return
	}
	if n.Default != "" && !slices.Contains(NetworkModes, n.Default) {
		d.errorf(key+".default", "Unknown network mode", "default may be %s; got %q.%s",
			quoteList(NetworkModes), n.Default, didYouMean(n.Default, NetworkModes))
	}
	for i, m := range n.Modes {
		k := key + ".modes." + strconv.Itoa(i)
		switch {
		case !slices.Contains(NetworkModes, m):
			d.errorf(k, "Unknown network mode", "modes may name %s; got %q.%s", quoteList(NetworkModes), m, didYouMean(m, NetworkModes))
		case slices.Index(n.Modes, m) < i:
			d.errorf(k, "Duplicate network mode", "mode %q is listed twice; remove one.", m)
		}
	}
	if n.Modes != nil && slices.Contains(NetworkModes, n.Default) && !slices.Contains(n.Modes, n.Default) {
		d.errorf(key+".modes", "Default mode not allowed",
			"modes does not hold the default mode %q (%s); add it to modes or change default.", n.Default, d.at(key+".default"))
	}
	if n.Policy != "" && (!filepath.IsAbs(n.Policy) || filepath.Clean(n.Policy) != n.Policy) {
		d.errorf(key+".policy", "Policy path not absolute",
			"policy is the egress policy file's path in the image, outside every workspace; use a clean absolute path, e.g. %q; got %q.", SessionNetworkPolicyFile, n.Policy)
	}
	needs := n.Default == "isolated" || n.Default == "proxy"
	switch {
	case needs && !slices.Contains(s.Plugins, PluginSessionNetwork):
		d.errorf(key+".default", "Plugin not installed",
			"default = %q needs the session-network plugin in the daemon; add plugins = [%q] to service %q, or set default = \"disabled\".",
			n.Default, PluginSessionNetwork, s.Name)
	case !needs && n.Default == "disabled" && n.Modes != nil:
		d.errorf(key+".modes", "Modes without the plugin",
			"with default = \"disabled\" the session-network plugin is off and no session can choose a mode; set default = \"isolated\" or \"proxy\", or remove modes.")
	}
}
