package history

import (
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// kernelTypes caches the kernel's BTF for every load of the recorder's programs in this process.
// Decoding the kernel's BTF and the types the programs' CO-RE relocations and attach points name
// is most of the cost of starting a recorder (about 25 of 35 ms on a distribution kernel).
var kernelTypes = struct {
	once  sync.Once
	cache *btf.Cache
}{}

func btfCache() *btf.Cache {
	kernelTypes.once.Do(func() { kernelTypes.cache = btf.NewCache() })
	return kernelTypes.cache
}

// Prewarm does ahead of time, while nothing waits, the work of a recorder's start that does not
// touch the kernel's BPF state: it decodes the kernel's BTF and the types the programs refer to.
// No BPF object is created, so a capture of the BPF domain taken meanwhile sees nothing of it.
// Start works without it, only slower. The error is that of an unreadable kernel BTF, which
// Start would report too.
func Prewarm() error {
	kernel, err := btfCache().Kernel()
	if err != nil {
		return err
	}
	spec, err := loadHistory()
	if err != nil {
		return err
	}
	// CO-RE relocations look kernel types up by the name of the program's type without its
	// ___flavour suffix; tracing programs look up btf_trace_<tracepoint>. Looking them up now
	// decodes them into the cache.
	for typ := range spec.Types.All() {
		name := typ.TypeName()
		if i := strings.LastIndex(name, "___"); i > 0 {
			name = name[:i]
		}
		if name != "" {
			_, _ = kernel.AnyTypesByName(name)
		}
	}
	for _, p := range spec.Programs {
		if p.AttachTo != "" && p.Type == ebpf.Tracing {
			var td *btf.Typedef
			_ = kernel.TypeByName("btf_trace_"+p.AttachTo, &td)
		}
	}
	return nil
}
