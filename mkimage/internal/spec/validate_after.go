package spec

import (
	"fmt"
	"slices"

	"github.com/allox-os/allox/internal/manifest"
)

// validateAfter checks that a service waits only for services that exist, once each.
func (d *decoder) validateAfter(key string, s Service, names []string) {
	for i, a := range s.After {
		k := fmt.Sprintf("%s.after.%d", key, i)
		switch {
		case a == s.Name:
			d.errorf(k, "Service waits for itself", "service %q names itself in after; remove %q.", s.Name, a)
		case !slices.Contains(names, a):
			others := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == s.Name })
			known := "it is the only service"
			if len(others) > 0 {
				known = "the others are " + quoteList(others)
			}
			d.errorf(k, "Unknown service in after",
				"service %q waits for %q, but no service of that name is defined; %s.%s",
				s.Name, a, known, didYouMean(a, others))
		case slices.Index(s.After, a) < i:
			d.errorf(k, "Duplicate dependency", "%q is already listed in after; remove the second one.", a)
		}
	}
}

// checkCycle reports a dependency cycle among the well-formed dependencies (the checks above
// cover the rest); manifest.StartOrder, which init runs at boot, is the judge.
func (d *decoder) checkCycle(services []Service) {
	m := manifest.Manifest{}
	defined := map[string]bool{}
	for _, s := range services {
		defined[s.Name] = true
	}
	for _, s := range services {
		svc := manifest.Service{Name: s.Name}
		for _, a := range s.After {
			if defined[a] && a != s.Name {
				svc.After = append(svc.After, a)
			}
		}
		m.Services = append(m.Services, svc)
	}
	if _, err := m.StartOrder(); err != nil {
		d.errorf(fmt.Sprintf("service.%d.after", firstOnCycle(m.Services)), "Service dependency cycle",
			"%v. Init could never start these services; remove one of the after entries that close the loop.", err)
	}
}

// firstOnCycle returns the index of the first service that depends, through after, on itself.
func firstOnCycle(services []manifest.Service) int {
	after := map[string][]string{}
	for _, s := range services {
		after[s.Name] = s.After
	}
	for i, s := range services {
		seen := map[string]bool{}
		stack := slices.Clone(s.After)
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if n == s.Name {
				return i
			}
			if !seen[n] {
				seen[n] = true
				stack = append(stack, after[n]...)
			}
		}
	}
	return 0
}
