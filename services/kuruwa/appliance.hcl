# Kuruwa's configuration in the Allox appliance (mkimage installs it at /etc/kuruwa/kuruwa.hcl with
# the kuruwa service, whose kuruwad reads it with --config). Definition "session" runs terminals as
# runs of an Allox session through the workspace daemon's loopback listener: the session's
# current/ is HOME, its cgroup, limits and network mode apply, and session.rollback with
# kill_processes ends them. An instance names its session:
#   kuruwa --entry /run/kuruwa/manage/sock instance start session --agent A --session S
# Tenant "agent" is a restricted entry (/run/kuruwa/tenants/agent/sock) that may create nothing by
# itself; the host grants it an instance or a terminal (kuruwa grant agent --terminal NAME).

definition "session" {
  kind   = "allox_session"
  daemon = "http://127.0.0.1:8092"
}

tenant "agent" {
  definitions = []
}
