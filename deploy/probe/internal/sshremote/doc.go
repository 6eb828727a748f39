// Package sshremote is the Probe's ssh_remote channel, ide_primary: one SSH endpoint through which
// an IDE's remote SSH (VS Code Remote-SSH, JetBrains Gateway, Zed) or a plain ssh/sftp client works
// in a session's workspace inside its Worker Sandbox.
//
// The far side is the session's own sandbox. Every SSH channel becomes one run of the session on
// its appliance, attached to the channel through the appliance's process.exec (a run's stdio, or
// its own terminal, over the authenticated host listener): a shell or an exec is that command; the
// sftp subsystem is `allox sftp-server`; a direct-tcpip or direct-streamlocal@openssh.com forward
// is `allox relay`, which makes the connection from inside the sandbox. So everything an SSH user
// does has the identity, cgroup, limits, network mode and view of the files of the session's runs,
// is tracked like them, and ends with them (a rollback with kill_processes ends an SSH shell too).
// The alternatives were weighed: an sshd inside the appliance would put a second authentication
// and a second process model inside the guest, each login outside the daemon's tracking unless
// wrapped anyway; a Kuruwa terminal is the persistent terminal of terminal_fallback, not a
// channel multiplexer.
//
// Authentication is by OpenSSH user certificates that the Gateway signs after its approval
// decision (Issue): short-lived (MaxLifetime), for one principal, "AGENT+SESSION", which is also
// the login name, so a certificate admits exactly one session. Nothing else is accepted: no
// passwords, no plain keys. Each connection and each channel is reported as Activity (who — the
// certificate's key id —, which session, which channel, when, and how it ended); content never is.
//
// Not served: agent forwarding (auth-agent-req@openssh.com is answered "no"), remote forwarding
// (tcpip-forward), X11.
package sshremote
