package spec

import (
	"fmt"
	"slices"
	"strings"
)

// KnownPlugins are the optional plugins a service's plugins attribute may name. Each is linked
// into the service's binary only when asked for, by building it with PluginTag(name).
var KnownPlugins = []string{"process-tree"}

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
		}
	}
}
