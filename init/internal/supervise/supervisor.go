package supervise

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/allox-os/allox/internal/manifest"
)

// DefaultPath is the PATH services get unless their Env sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Config is the supervisor's environment. Zero durations take the defaults.
type Config struct {
	Root    string    // resolves Ready.Path checks
	LogDir  string    // one <name>.log per service; empty: console only
	Console io.Writer // receives "[name] line" for every output line; nil: dropped
	// BaseEnv is every service's environment before its own Env; nil means PATH=DefaultPath, HOME=/.
	BaseEnv      map[string]string
	ReadyTimeout time.Duration // default 2 min (TCG boots are slow)
	StopTimeout  time.Duration // SIGTERM to SIGKILL, default 5 s
	Backoff      Backoff       // default DefaultBackoff
	Notify       func(Event)   // called from many goroutines; nil drops events
	// CgroupDir, if set, holds one cgroup per service (CgroupDir/<name>), into which its process
	// is cloned (CLONE_INTO_CGROUP); a missing group only warns, and the service runs in init's.
	CgroupDir string
	// Trampoline, if set, is an executable that runs Trampoline first (init: /proc/self/exe):
	// a service with NoFile or OOMScoreAdj starts through it and so runs with them from its first
	// instruction. Empty: they are applied from outside right after the exec.
	Trampoline string
}

// Supervisor runs a fixed list of services.
type Supervisor struct {
	cfg      Config
	reaper   *Reaper
	services []*service
	stopping chan struct{}
	stopOnce sync.Once
	bootOnce sync.Once
	critical chan string
	booted   chan struct{}
}

// New prepares services, given in start order (manifest.StartOrder): each After names an
// earlier service. Nothing runs before Start.
func New(cfg Config, reaper *Reaper, services []manifest.Service) (*Supervisor, error) {
	if cfg.BaseEnv == nil {
		cfg.BaseEnv = map[string]string{"PATH": DefaultPath, "HOME": "/"}
	}
	cfg.ReadyTimeout = or(cfg.ReadyTimeout, 2*time.Minute)
	cfg.StopTimeout = or(cfg.StopTimeout, 5*time.Second)
	if cfg.Backoff == (Backoff{}) {
		cfg.Backoff = DefaultBackoff
	}
	s := &Supervisor{
		cfg: cfg, reaper: reaper,
		stopping: make(chan struct{}),
		critical: make(chan string, len(services)),
		booted:   make(chan struct{}),
	}
	byName := map[string]*service{}
	for _, spec := range services {
		v := newService(s, spec)
		for _, dep := range spec.After {
			d, ok := byName[dep]
			if !ok {
				return nil, fmt.Errorf("service %q: after %q, which does not start before it (use manifest.StartOrder)", spec.Name, dep)
			}
			v.deps = append(v.deps, d)
		}
		byName[spec.Name] = v
		s.services = append(s.services, v)
	}
	return s, nil
}

func or(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Start launches the named services, or with no name every service not launched yet; each waits
// for the readiness of the services it is After. Init starts the kata-agent first, alone, and the
// others once the store is mounted.
func (s *Supervisor) Start(names ...string) {
	s.bootOnce.Do(func() {
		go func() {
			for _, v := range s.services {
				<-v.ready
			}
			close(s.booted)
		}()
	})
	for _, v := range s.services {
		if (len(names) == 0 || slices.Contains(names, v.spec.Name)) && v.launched.CompareAndSwap(false, true) {
			go v.run()
		}
	}
}

// Booted is closed once every service has been started and became ready or failed to in time.
func (s *Supervisor) Booted() <-chan struct{} { return s.booted }

// Critical receives the name of each Critical service that ended for good: time to power off.
func (s *Supervisor) Critical() <-chan string { return s.critical }

// Stop ends restarts, then stops the services in reverse start order: SIGTERM, and SIGKILL to
// the process group after StopTimeout.
func (s *Supervisor) Stop() {
	s.stopOnce.Do(func() { close(s.stopping) })
	for i := len(s.services) - 1; i >= 0; i-- {
		s.services[i].terminate(s.cfg.StopTimeout)
	}
}

func (s *Supervisor) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

func (s *Supervisor) emit(e Event) {
	if s.cfg.Notify != nil {
		s.cfg.Notify(e)
	}
}
