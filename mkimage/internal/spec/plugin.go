package spec

import (
	"fmt"
	"slices"
	"strings"
)

// KnownPlugins are the optional plugins a service's plugins attribute may name. Each is linked
// into the service's binary only when asked for, by building it with PluginTag(name).
var KnownPlugins = []string{PluginProcessTree, PluginSystemEffects}

// Plugin names.
const (
	PluginProcessTree   = "process-tree"   // the eBPF process-tree provider
	PluginSystemEffects = "system-effects" // the system-effects observer, its verifiers and recover step
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
	PluginSystemEffects: {ObserverScopeFile: defaultObserverScope},
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
