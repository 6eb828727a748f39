// Package netbroker is the session network's broker: the egress policy, the HTTP/1.1 forward
// proxy (absolute-URI requests and CONNECT) that serves each session's 127.0.0.1:3128, the raw
// TCP relay behind `allox network connect HOST PORT`, their limits and their audit log. It is
// domain code: it never logs, knows nothing of the RPC layer, of bubblewrap or of the Plugin API.
// The caller opens each session's listener inside that session's network namespace and hands it
// to Broker.Serve; the broker dials out from its own (the daemon's) namespace, so a session
// reaches the network only through it.
//
// # The policy file
//
// One rule a line; '#' starts a comment; blank lines are ignored. A rule is
//
//	allow|deny host PATTERN [port PORTS]
//	allow|deny cidr PREFIX [port PORTS]
//
// PATTERN is a host name (example.com, matched exactly), "*.example.com" (any name below
// example.com, not example.com itself) or "*" (any name). Names are compared without case and
// without a trailing dot. A host rule matches only requests made by name: a request for an IP
// literal is decided by cidr rules. PREFIX is an IPv4 or IPv6 prefix (10.0.0.0/8, fd00::/8, or
// a bare address meaning /32 or /128). PORTS is a comma-separated list of ports and ranges
// (443, 8080-8090, 22,80,443); without it a rule matches every port.
//
// The file is global rules first; a section header scopes the rules below it:
//
//	[global]               the rules every agent and session gets (also the rules before any header)
//	[agent AGENT]          rules for every session of agent AGENT
//	[session AGENT/SESSION] rules for one session
//
// and the global part may set the final default:
//
//	default allow|deny     what happens when no rule and no built-in protection matches (allow)
//
// For a connection to NAME:PORT the broker resolves NAME itself, and decides each address it
// would dial; it then dials only an allowed address, by address, never resolving again (no DNS
// rebinding). Each address is checked against the session's rules, then its agent's, then the
// global ones; the first rule that matches decides. When none matches, the built-in protections
// deny the protected ranges:
//
//	link-local    169.254.0.0/16, fe80::/10 (cloud metadata services live here)
//	loopback      127.0.0.0/8, ::1/128
//	unspecified   0.0.0.0/8, ::/128 (connecting to 0.0.0.0 reaches the local host)
//	own           the guest's own addresses, as the caller passes them
//	private       10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fc00::/7
//
// and everything else gets the final default: allowed unless the file says "default deny".
// An "allow host" rule never opens a protected address: it matches only addresses outside those
// ranges, so a permitted name that resolves to the metadata service is still denied. Only an
// "allow cidr" rule opens a protected range (e.g. "allow cidr 10.0.2.2/32 port 8080-8090" for a
// service on the VM host). IPv4-mapped IPv6 addresses are decided as the IPv4 address they map.
//
// Every decision names the rule that made it: "policy.conf:12" or "default: link-local".
// A malformed file refuses to load with an error naming file:line and the fix; a failed
// Broker.Reload keeps the policy in force.
//
// # Limits
//
// Each session has its own connection budget (Limits.MaxConns, 64): requests in flight, CONNECT
// tunnels and connect relays. One more is refused — 503 from the proxy, ErrLimit from Dial —
// and audited as "limit". Client connections to the listener beyond 4×MaxConns wait to be
// accepted. Dialling (resolution included) has Limits.ConnectTimeout (10 s); a connection on
// which no byte moves either way for Limits.IdleTimeout (5 min) is closed, a forwarded
// request whose destination sends no response header in that time gets 504. Sessions share
// nothing on the data path: each has its own listener, server, connection pool, semaphore and
// goroutines; the one shared thing is the audit file, appended once per request or tunnel, at
// its end, under a short flock. Tunnels between two TCP sockets are spliced by the kernel.
//
// # What the audit knows
//
// Every proxied request, CONNECT tunnel and connect relay is one JSON line (Record) in the
// caller's directory, rotated by size. The proxy cannot know which run made a request: the
// session's listener is shared by all of its runs, so its records carry no run; connect is
// called by the session socket, which knows the caller's run, so its records do. For plain HTTP
// requests the bytes counted are the request and response bodies; for CONNECT and connect they
// are every byte relayed each way.
package netbroker
