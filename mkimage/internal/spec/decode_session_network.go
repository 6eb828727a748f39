package spec

import (
	"github.com/hashicorp/hcl/v2"
)

// SessionNetwork is the sandbox block's session_network block: the session-network plugin's
// default mode, the modes session.create may choose and the egress policy file. mkimage renders
// it into the daemon's --session-network, --session-network-modes and --session-network-policy.
type SessionNetwork struct {
	// Default is the mode of a session that chooses none: disabled, isolated or proxy.
	Default string `json:"default"`
	// Modes are the modes session.create may choose (nil: all three).
	Modes []string `json:"modes,omitempty"`
	// Policy is the broker's policy file in the image ("": the plugin's SessionNetworkPolicyFile).
	// mkimage installs it: the plugin's default policy with Rules before its default line.
	Policy string `json:"policy,omitempty"`
	// Rules are policy lines of the image's own (the policy file's syntax), first in the file.
	Rules string `json:"rules,omitempty"`
}

// NetworkModes are the session network's modes.
var NetworkModes = []string{"disabled", "isolated", "proxy"}

var sessionNetworkSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "default", Required: true}, {Name: "modes"}, {Name: "policy"}, {Name: "rules"}},
}

// decodeSessionNetwork decodes the session_network block at key ("service.0.sandbox.session_network").
func (d *decoder) decodeSessionNetwork(key string, b *hcl.Block) *SessionNetwork {
	s := &SessionNetwork{}
	c := d.content(key, b.Body, sessionNetworkSchema)
	attr(d, c, key, "default", &s.Default)
	attr(d, c, key, "modes", &s.Modes)
	attr(d, c, key, "policy", &s.Policy)
	attr(d, c, key, "rules", &s.Rules)
	return s
}
