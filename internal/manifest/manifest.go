// Package manifest is the contract between mkimage, which writes the service manifest into the
// image, and the Go PID 1, which reads it at boot. It is versioned JSON; unknown fields are rejected.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Path is where mkimage places the manifest inside the image.
const Path = "/etc/allox/manifest.json"

// Version is the only manifest version this build reads and writes.
const Version = 1

// ExitOneShot is the exit status by which a service says "I am done, do not restart me",
// whatever its restart policy.
const ExitOneShot = 99

// Restart policies.
const (
	RestartAlways    = "always"
	RestartOnFailure = "on-failure"
	RestartNever     = "never"
)

// Manifest is what init needs to bring the appliance up.
type Manifest struct {
	Version  int       `json:"version"`
	Image    Image     `json:"image"`
	Hostname string    `json:"hostname"`
	Store    Store     `json:"store"`
	Network  *Network  `json:"network,omitempty"`
	FwCfg    []FwCfg   `json:"fw_cfg,omitempty"`
	Services []Service `json:"services"`
	// KataAgent is the kata-agent mkimage put into the image (nil: none). Init supervises it
	// itself, started before the workspace store and the services.
	KataAgent *KataAgent `json:"kata_agent,omitempty"`
}

// KataAgent is how init runs the image's kata-agent.
type KataAgent struct {
	Path string `json:"path"` // /usr/bin/kata-agent
	// MaxRestarts is how many times init restarts the agent after it failed (a non-zero status or
	// a signal) before the next failure powers the VM off, as Kata's FailureAction=poweroff does
	// at once. 0: no restart. An agent that exits 0 is done: the VM powers off.
	MaxRestarts int `json:"max_restarts"`
}

// Image names the image the manifest belongs to.
type Image struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Store describes the Btrfs workspace store.
type Store struct {
	// Serial is the virtio serial of the disk that holds the store (for example "allox-ws").
	Serial string `json:"serial"`
	// Mountpoint is where the store is mounted (the daemon's --root).
	Mountpoint string `json:"mountpoint"`
	// Label is the Btrfs label written when a blank disk is formatted.
	Label string `json:"label"`
	// FallbackSizeMiB is the size of the RAM-backed Btrfs used when no disk is attached.
	FallbackSizeMiB int `json:"fallback_size_mib"`
}

// Network configures the first NIC. An empty Address means loopback only.
type Network struct {
	Interface string `json:"interface"`
	Address   string `json:"address"` // CIDR, e.g. 10.0.2.15/24
	Gateway   string `json:"gateway,omitempty"`
}

// FwCfg copies a QEMU fw_cfg blob (for example the host RPC token) into a file at boot.
// A missing blob is not an error: the file is simply not written.
type FwCfg struct {
	Name string `json:"name"` // e.g. opt/allox/rpc-token
	Path string `json:"path"`
	Mode uint32 `json:"mode"`
}

// Service is one supervised process.
type Service struct {
	Name    string            `json:"name"`
	Command []string          `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	After   []string          `json:"after,omitempty"`
	Restart string            `json:"restart"`
	// MaxRestarts bounds the restarts per boot (0: no bound); once spent, the next exit is final.
	MaxRestarts int    `json:"max_restarts,omitempty"`
	Ready       *Ready `json:"ready,omitempty"`
	// OOMScoreAdj and NoFile are applied to the service (the kata-agent needs -997 and a high limit).
	OOMScoreAdj int    `json:"oom_score_adj,omitempty"`
	NoFile      uint64 `json:"nofile,omitempty"`
	// Critical services power the VM off when they exit for good (as Kata's agent unit does).
	Critical bool `json:"critical,omitempty"`
	// MemoryMin and MemoryLow (bytes) protect the service's memory: init runs each service in its
	// own cgroup, /sys/fs/cgroup/system/<name>, with these as memory.min and memory.low.
	MemoryMin int64 `json:"memory_min,omitempty"`
	MemoryLow int64 `json:"memory_low,omitempty"`
}

// Ready says how init knows a service is ready. Exactly one field is set.
type Ready struct {
	TCP  string `json:"tcp,omitempty"`  // host:port that accepts connections
	Path string `json:"path,omitempty"` // file that exists
}

// Decode reads a manifest, rejecting unknown fields, trailing data and other versions.
func Decode(r io.Reader) (*Manifest, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decode manifest: trailing data after the JSON object")
	}
	if m.Version != Version {
		return nil, fmt.Errorf("manifest version %d: this init reads version %d; rebuild the image with a matching mkimage", m.Version, Version)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Encode writes the manifest as indented JSON (map keys sorted, so the bytes are reproducible).
func Encode(w io.Writer, m *Manifest) error {
	if err := m.Validate(); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// Validate checks what init relies on: unique service names, known policies, dependencies that exist
// and do not form a cycle.
func (m *Manifest) Validate() error {
	var errs []error
	if m.Store.Mountpoint == "" {
		errs = append(errs, errors.New("store.mountpoint is empty"))
	}
	names := map[string]bool{}
	for i, s := range m.Services {
		switch {
		case s.Name == "":
			errs = append(errs, fmt.Errorf("services[%d].name is empty", i))
		case names[s.Name]:
			errs = append(errs, fmt.Errorf("services[%d].name %q is used twice", i, s.Name))
		}
		names[s.Name] = true
		if len(s.Command) == 0 {
			errs = append(errs, fmt.Errorf("service %q: command is empty", s.Name))
		}
		switch s.Restart {
		case RestartAlways, RestartOnFailure, RestartNever:
		default:
			errs = append(errs, fmt.Errorf("service %q: restart %q is not one of always, on-failure, never", s.Name, s.Restart))
		}
		if s.Ready != nil && (s.Ready.TCP == "") == (s.Ready.Path == "") {
			errs = append(errs, fmt.Errorf("service %q: ready needs exactly one of tcp or path", s.Name))
		}
	}
	if a := m.KataAgent; a != nil {
		if !strings.HasPrefix(a.Path, "/") {
			errs = append(errs, fmt.Errorf("kata_agent.path %q is not absolute", a.Path))
		}
		if a.MaxRestarts < 0 {
			errs = append(errs, fmt.Errorf("kata_agent.max_restarts %d is negative", a.MaxRestarts))
		}
	}
	for _, s := range m.Services {
		if s.MaxRestarts < 0 {
			errs = append(errs, fmt.Errorf("service %q: max_restarts %d is negative", s.Name, s.MaxRestarts))
		}
		for _, a := range s.After {
			if !names[a] {
				errs = append(errs, fmt.Errorf("service %q: after names unknown service %q", s.Name, a))
			}
		}
	}
	if len(errs) == 0 {
		if _, err := m.StartOrder(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// StartOrder returns the services in dependency order (a service after everything it names in
// After), keeping manifest order among independent services. Stop order is the reverse.
func (m *Manifest) StartOrder() ([]Service, error) {
	byName := map[string]Service{}
	for _, s := range m.Services {
		byName[s.Name] = s
	}
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[string]int{}
	var order []Service
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		switch state[name] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("services form a dependency cycle: %v", append(path, name))
		}
		state[name] = visiting
		for _, dep := range byName[name].After {
			if err := visit(dep, append(path, name)); err != nil {
				return err
			}
		}
		state[name] = done
		order = append(order, byName[name])
		return nil
	}
	for _, s := range m.Services {
		if err := visit(s.Name, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}
