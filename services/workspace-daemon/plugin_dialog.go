//go:build allox_dialog

package main

import (
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/dialog"
	"github.com/allox-os/allox/services/internal/plugin"
)

// installDialog links in the dialog plugin: mkimage builds the daemon with the allox_dialog tag
// for a service with plugins = ["dialog"]. Opened (--dialog), it serves dialog.ask on the session
// sockets and dialog.pending and dialog.answer on the host listener.
var installDialog = func(_ daemon.Config, p *plugin.Plugin) {
	p.API, p.Version = plugin.APIVersion, dialog.Version
	p.Open = dialog.New
}
