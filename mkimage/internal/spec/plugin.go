package spec

import (
	"fmt"
	"github.com/allox-os/allox/rootfs"
	"slices"
	"strings"
)

// KnownPlugins are the optional plugins a service's plugins attribute may name. Each is linked
// into the service's binary only when asked for, by building it with PluginTag(name).
var KnownPlugins = []string{PluginDialog, PluginMonitor, PluginProcessTree, PluginSessionNetwork, PluginSessionShare, PluginSystemEffects}

// Plugin names.
const (
	PluginProcessTree    = "process-tree"    // the eBPF process-tree provider
	PluginSessionNetwork = "session-network" // per-session network namespaces, the proxy and its broker
	PluginSessionShare   = "session-share"   // file access between sessions through their sockets (allox share)
	PluginSystemEffects  = "system-effects"  // the system-effects observer, its verifiers and recover step
	PluginDialog         = "dialog"          // the Probe's dialog channel: runs ask, the host listener answers
	PluginMonitor        = "monitor"         // the OTLP receiver per session, run profiling, summaries and reports (--monitor-root)
)

// PluginProgram is a separate program a plugin installs beside the service it is linked into.
type PluginProgram struct {
	Path    string // in the image
	Package string // Go package, relative to the module root
	// Pinned programs have their sha256 written to PinFile: the daemon checks it before each run.
	Pinned bool
}

// LibexecDir holds plugin programs; PinFile lists the sha256 of the pinned ones (sha256sum format).
const (
	LibexecDir = "/usr/libexec/allox"
	PinFile    = LibexecDir + "/system-effects.sha256"
)

// PluginFiles are the data files each plugin installs, path → content.
var PluginFiles = map[string]map[string]string{
	PluginSystemEffects:  {ObserverScopeFile: defaultObserverScope},
	PluginSessionNetwork: {SessionNetworkPolicyFile: defaultSessionNetworkPolicy},
}

// SessionNetworkPolicyFile is the egress policy the session-network plugin installs (the daemon's
// default --session-network-policy).
const SessionNetworkPolicyFile = "/etc/allox/session-network/policy"

// defaultSessionNetworkPolicy adds no rule to the broker's built-in protections: link-local
// (cloud metadata), loopback, the unspecified address, the guest's own addresses and the private
// ranges are denied, everything else is allowed.
var defaultSessionNetworkPolicy = sessionNetworkPolicy("")

// sessionNetworkPolicy is the plugin's policy file with the image's own rules first.
func sessionNetworkPolicy(rules string) string {
	if rules != "" && !strings.HasSuffix(rules, "\n") {
		rules += "\n"
	}
	return `# The session network's egress policy (allox session-network plugin). One rule a line, first
# match wins; sections [agent AGENT] and [session AGENT/SESSION] override [global]:
#   allow|deny host PATTERN [port PORTS]     e.g. allow host *.example.com port 443
#   allow|deny cidr PREFIX [port PORTS]      e.g. allow cidr 10.0.2.2/32 port 8080-8090
# Without a matching rule link-local (cloud metadata), loopback, the guest's own addresses and
# private ranges are denied; then the default decides. Reload: SIGHUP or network.reload.
` + rules + "default allow\n"
}

// PluginFilesOf are the data files plugin p installs for service svc, path → content: PluginFiles,
// except the session network's policy, which the service's session_network block may move and
// give rules of its own.
func PluginFilesOf(svc Service, p string) map[string]string {
	if p != PluginSessionNetwork || svc.Sandbox == nil || svc.Sandbox.SessionNetwork == nil {
		return PluginFiles[p]
	}
	n := svc.Sandbox.SessionNetwork
	path := n.Policy
	if path == "" {
		path = SessionNetworkPolicyFile
	}
	return map[string]string{path: sessionNetworkPolicy(n.Rules)}
}

// ObserverScopeFile is the system-effects scope file the plugin installs (the daemon's
// --observer-scope): every optional domain, and the VM-level /tmp, which no rollback restores.
const ObserverScopeFile = "/etc/allox/system-effects/scope.json"

const defaultObserverScope = `{
  "paths": ["/tmp"],
  "sysctl": "all",
  "bpf": true,
  "mounts": true,
  "network": true,
  "modules": true,
  "processes": true
}
`

// PluginPrograms are the programs each plugin installs.
var PluginPrograms = map[string][]PluginProgram{
	PluginSystemEffects: {
		{Path: LibexecDir + "/allox-system-effects-observe", Package: "./services/system-effects-observe", Pinned: true},
		{Path: LibexecDir + "/allox-system-effects-verify", Package: "./services/system-effects-verify", Pinned: true},
		{Path: LibexecDir + "/allox-system-effects-recovery-verify", Package: "./services/system-effects-recovery-verify", Pinned: true},
		{Path: LibexecDir + "/allox-system-effects-recover", Package: "./services/system-effects-recover", Pinned: true},
	},
}

// DaemonPrograms are installed with every service built from DaemonPackage: the client of the
// sessions' own sockets, which the daemon binds into every sandboxed run (its --client default).
var DaemonPrograms = []PluginProgram{{Path: LibexecDir + "/allox", Package: "./services/allox"}}

// DaemonFiles are data files installed with every service built from DaemonPackage, image path →
// source file relative to the module root: the python shims over the client, which the daemon
// binds at /run/allox/<name> in every sandboxed run (they must sit beside the client).
var DaemonFiles = map[string]string{
	LibexecDir + "/network.py": "services/allox/network.py",
	LibexecDir + "/share.py":   "services/allox/share.py",
}

// KuruwaPackage is the build package of Kuruwa's daemons (kuruwad), the appliance's optional
// kuruwa service.
const KuruwaPackage = "./services/kuruwa/cmd/kuruwad"

// KuruwaConfigFile is where the kuruwa service's configuration is installed (its --config).
const KuruwaConfigFile = "/etc/kuruwa/kuruwa.hcl"

// CompanionPrograms are installed with every service built from the package named: the
// workspace daemon's session client, and the kuruwa CLI beside kuruwad.
var CompanionPrograms = map[string][]PluginProgram{
	DaemonPackage: DaemonPrograms,
	KuruwaPackage: {{Path: "/usr/bin/kuruwa", Package: "./services/kuruwa"}},
}

// CompanionFiles are the data files installed with every service built from the package
// named, image path → source file relative to the module root.
var CompanionFiles = map[string]map[string]string{
	DaemonPackage: DaemonFiles,
	KuruwaPackage: {KuruwaConfigFile: "services/kuruwa/appliance.hcl"},
}

// PluginTag is the Go build tag that links plugin name into a service: "allox_" followed by the
// name with '-' replaced by '_' ("process-tree" → "allox_process_tree").
func PluginTag(name string) string {
	return "allox_" + strings.ReplaceAll(name, "-", "_")
}

// validatePlugins checks that every plugin is known, named once, and only on a service that mkimage
// builds (plugins are build tags).
func (d *decoder) validatePlugins(key string, s Service) {
	if len(s.Plugins) > 0 && s.Build == "" {
		d.errorf(key+".plugins", "Plugins without build",
			"plugins are linked in when mkimage builds the service, and service %q has no build; "+
				"add build = \"./services/%s\" or remove plugins.", s.Name, s.Name)
	}
	for i, p := range s.Plugins {
		k := fmt.Sprintf("%s.plugins.%d", key, i)
		switch {
		case !slices.Contains(KnownPlugins, p):
			d.errorf(k, "Unknown plugin", "plugins may name %s; got %q.%s",
				quoteList(KnownPlugins), p, didYouMean(p, KnownPlugins))
		case slices.Index(s.Plugins, p) < i:
			d.errorf(k, "Duplicate plugin", "plugin %q is listed twice; remove one.", p)
		case p == PluginSystemEffects && slices.Contains(s.Plugins, PluginProcessTree):
			d.errorf(k, "Plugins are exclusive",
				"the system-effects observer and the eBPF process-tree provider both hook process lifecycles "+
					"and are never loaded together; keep one of %q and %q.", PluginProcessTree, PluginSystemEffects)
		}
	}
}

// RunAccount names the sandboxed runs' identity in the image's /etc/passwd and /etc/group: the
// workspace daemon's default --run-uid and --run-gid (2000), so that the tools agents run (ssh,
// git, pip) can look their own user up.
var RunAccount = rootfs.Account{Name: "allox-run", UID: 2000, GID: 2000, Comment: "Allox sandboxed runs"}
