package capture

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/allox-os/allox/services/internal/effects/evidence"
)

// BPF captures the kernel's BPF programs, maps and links. Objects are
// identified by what they are, not by id: a program by type, name and tag,
// a map by type, name, sizes and flags, a link by type and its program's
// identity. Identical objects are counted.
func BPF() *evidence.Snapshot {
	counts := map[string]int{}
	progs, err := bpfPrograms(counts)
	if err == nil {
		err = bpfMaps(counts)
	}
	if err == nil {
		err = bpfLinks(counts, progs)
	}
	if err != nil {
		return unconfirmed(err.Error())
	}
	s := &evidence.Snapshot{}
	for k, n := range counts {
		s.Items = append(s.Items, evidence.Item{Key: k, Value: fmt.Sprintf("count=%d", n)})
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func progIdentity(id ebpf.ProgramID) (string, error) {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return "", err
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return "", fmt.Errorf("bpf program %d info: %w", id, err)
	}
	return fmt.Sprintf("%s/%s/%s", info.Type, orDash(info.Name), info.Tag), nil
}

func bpfPrograms(counts map[string]int) (map[ebpf.ProgramID]string, error) {
	ids := map[ebpf.ProgramID]string{}
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return ids, nil
		}
		if err != nil {
			return nil, fmt.Errorf("bpf program ids: %w", err)
		}
		id = next
		ident, err := progIdentity(id)
		if errors.Is(err, os.ErrNotExist) {
			continue // unloaded meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("bpf program %d: %w", id, err)
		}
		ids[id] = ident
		counts["prog "+ident]++
	}
}

func bpfMaps(counts map[string]int) error {
	var id ebpf.MapID
	for {
		next, err := ebpf.MapGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bpf map ids: %w", err)
		}
		id = next
		m, err := ebpf.NewMapFromID(id)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("bpf map %d: %w", id, err)
		}
		info, err := m.Info()
		m.Close()
		if err != nil {
			return fmt.Errorf("bpf map %d info: %w", id, err)
		}
		counts[fmt.Sprintf("map %s/%s key=%d value=%d max_entries=%d flags=%#x",
			info.Type, orDash(info.Name), info.KeySize, info.ValueSize, info.MaxEntries, info.Flags)]++
	}
}

func bpfLinks(counts map[string]int, progs map[ebpf.ProgramID]string) error {
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			return fmt.Errorf("bpf link %d info: %w", it.ID, err)
		}
		ident, ok := progs[info.Program]
		if !ok {
			if ident, err = progIdentity(info.Program); err != nil {
				ident = "-"
			}
		}
		counts[fmt.Sprintf("link type=%d prog=%s", info.Type, ident)]++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("bpf links: %w", err)
	}
	return nil
}

// BPFObjects lists the ids of every BPF program, map and link that exists
// now, as "prog 12", "map 40", "link 3". The observer uses it to tell its
// own history recorder's objects apart and to wait until the kernel has
// freed them (a detached tracing program is freed after an RCU grace
// period, not when its descriptor is closed).
func BPFObjects() (map[string]bool, error) {
	ids := map[string]bool{}
	var p ebpf.ProgramID
	for {
		n, err := ebpf.ProgramGetNextID(p)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bpf program ids: %w", err)
		}
		p = n
		ids[fmt.Sprintf("prog %d", p)] = true
	}
	var m ebpf.MapID
	for {
		n, err := ebpf.MapGetNextID(m)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bpf map ids: %w", err)
		}
		m = n
		ids[fmt.Sprintf("map %d", m)] = true
	}
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		ids[fmt.Sprintf("link %d", it.ID)] = true
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("bpf links: %w", err)
	}
	return ids, nil
}
