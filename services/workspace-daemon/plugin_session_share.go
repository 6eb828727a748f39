//go:build allox_session_share

package main

import (
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/sessionshare"
)

// installSessionShare links in the session-share plugin: mkimage builds the daemon with the
// allox_session_share tag for a service with plugins = ["session-share"]. Opened (--share-tools),
// it keeps each session's share state and serves share.enable, share.disable, share.status,
// share.ls, share.stat, share.read and share.write on the session sockets.
var installSessionShare = func(_ daemon.Config, p *plugin.Plugin) {
	p.API, p.Version = plugin.APIVersion, sessionshare.Version
	p.Open = sessionshare.New(sessionshare.Config{})
}
