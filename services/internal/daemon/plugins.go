package daemon

import (
	"errors"
	"maps"
	"slices"

	"github.com/allox-os/allox/services/internal/plugin"
)

// RegisterPlugins registers the open plugins' actions, each served where it declares.
func RegisterPlugins(r *Router, plugins *plugin.Loaded) error {
	actions := plugins.Actions()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(actions)) {
		errs = append(errs, r.Register(name, actions[name]))
	}
	return errors.Join(errs...)
}
