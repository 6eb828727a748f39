package spec

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/allox-os/allox/internal/manifest"
)

var envRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateServices checks each service, then the dependencies between them.
func (d *decoder) validateServices(services []Service) {
	first := map[string]int{}
	var names []string
	for i, s := range services {
		key := fmt.Sprintf("service.%d", i)
		d.checkID(key+".name", "service name", s.Name)
		if j, dup := first[s.Name]; dup {
			d.errorf(key+".name", "Duplicate service",
				"service %q is already defined at %s; rename one of them or merge the two blocks.", s.Name, d.at(fmt.Sprintf("service.%d", j)))
			continue
		}
		first[s.Name] = i
		names = append(names, s.Name)
	}
	for i, s := range services {
		d.validateService(fmt.Sprintf("service.%d", i), s, names)
	}
	d.checkCycle(services)
}

func (d *decoder) validateService(key string, s Service, names []string) {
	if fix := buildFix(s.Build, s.Name); fix != s.Build {
		d.errorf(key+".build", "Invalid build package",
			"build is a Go package path relative to the module root, starting with \"./\", such as \"./services/workspace-daemon\"; write %q.", fix)
	}
	d.validatePlugins(key, s)
	switch {
	case len(s.Command) == 0:
		d.errorf(key+".command", "Empty command", "command must name the program and its arguments, e.g. [\"/usr/bin/%s\"].", s.Name)
	case !path.IsAbs(s.Command[0]):
		d.errorf(key+".command.0", "Command is not an absolute path",
			"init does not search $PATH: command[0] must be an absolute path, e.g. %q.", path.Join("/usr/bin", s.Command[0]))
	}
	for k := range s.Env {
		if !envRE.MatchString(k) {
			d.errorf(key+".env."+k, "Invalid environment variable name",
				"%q must be letters, digits and '_', not starting with a digit, e.g. %q.", k, strings.ToUpper(sanitizeEnv(k)))
		}
	}
	if !slices.Contains(restartPolicies, s.Restart) {
		d.errorf(key+".restart", "Unknown restart policy", "restart must be %s; got %q.%s",
			quoteList(restartPolicies), s.Restart, didYouMean(s.Restart, restartPolicies))
	}
	if s.Ready != nil {
		d.validateReady(key+".ready", s.Ready)
	}
	if s.OOMScoreAdj < -1000 || s.OOMScoreAdj > 1000 {
		d.errorf(key+".oom_score_adj", "Invalid oom_score_adj",
			"oom_score_adj must be between -1000 and 1000; got %d.", s.OOMScoreAdj)
	}
	d.validateSandbox(key, s)
	d.validateAfter(key, s, names)
}

func (d *decoder) validateReady(key string, r *manifest.Ready) {
	switch {
	case (r.TCP == "") == (r.Path == ""):
		d.errorf(key, "Invalid ready block", "ready needs exactly one of tcp (host:port) or path (a file that appears); set one.")
	case r.TCP != "":
		host, port, err := net.SplitHostPort(r.TCP)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || n == 0 {
			d.errorf(key+".tcp", "Invalid ready address",
				"tcp must be host:port with a port from 1 to 65535, e.g. \"127.0.0.1:8092\"; got %q.", r.TCP)
		} else if host == "" {
			d.errorf(key+".tcp", "Invalid ready address", "tcp needs a host to connect to; write %q.", "127.0.0.1:"+port)
		}
	default:
		d.checkAbs(key+".path", "path", r.Path)
	}
}

func sanitizeEnv(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 128 && (r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, s)
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		s = "_" + s
	}
	return s
}

// buildFix returns build as it should be written: "" or "./" followed by a clean path that stays
// inside the module.
func buildFix(build, service string) string {
	if build == "" {
		return ""
	}
	rel := strings.TrimPrefix(path.Clean("/"+build), "/")
	if rel == "" {
		rel = "services/" + service
	}
	return "./" + rel
}
