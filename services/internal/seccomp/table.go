package seccomp

import "golang.org/x/sys/unix"

// table is the filter, one row per system call or system call and condition. Calls not in it
// are allowed. Where a row departs from Docker's default profile, its reason says so.
var table = concat(
	[]Rule{
		// The kernel's own code and its most exposed interfaces.
		{Syscall: "bpf", Reason: "loads eBPF programs and maps into the kernel, a large attack surface; the guest's observer is the only user"},
		{Syscall: "perf_event_open", Reason: "performance counters: kernel address leaks and a long history of kernel bugs"},
		{Syscall: "kexec_load", Reason: "loads a new kernel to boot into"},
		{Syscall: "kexec_file_load", Reason: "loads a new kernel to boot into"},
		{Syscall: "init_module", Reason: "loads kernel code"},
		{Syscall: "finit_module", Reason: "loads kernel code"},
		{Syscall: "delete_module", Reason: "unloads kernel code"},
		{Syscall: "create_module", Reason: "obsolete module call (ENOSYS since 2.6), denied so that no kernel brings it back"},
		{Syscall: "get_kernel_syms", Reason: "obsolete module call (ENOSYS since 2.6), denied so that no kernel brings it back"},
		{Syscall: "query_module", Reason: "obsolete module call (ENOSYS since 2.6), denied so that no kernel brings it back"},
		{Syscall: "uselib", Reason: "obsolete a.out library loader, an old source of kernel bugs"},
		{Syscall: "_sysctl", Reason: "obsolete binary sysctl (removed in 5.5); /proc/sys is the interface"},
		{Syscall: "lookup_dcookie", Reason: "profiling aid of the old oprofile (removed in 6.8)"},
		{Syscall: "syslog", Reason: "reads and clears the kernel log, which leaks kernel addresses"},
		{Syscall: "kcmp", Reason: "compares kernel objects of two processes, an ordering oracle on kernel pointers; only checkpoint/restore tools need it"},
		{Syscall: "userfaultfd", Reason: "lets a process stall the kernel on a page fault, the usual way to win a kernel race"},
		{Syscall: "io_uring_setup", Reason: "io_uring is a large attack surface, and the operations of a ring are never seen by seccomp (Docker denies it too since 25.0)"},
		{Syscall: "io_uring_enter", Reason: "io_uring: see io_uring_setup"},
		{Syscall: "io_uring_register", Reason: "io_uring: see io_uring_setup"},

		// Files by handle: around every bind mount.
		{Syscall: "open_by_handle_at", Reason: "opens any file of a filesystem by handle, past the sandbox's bind mounts (the \"shocker\" escape)"},
		{Syscall: "name_to_handle_at", Reason: "makes the handles that open_by_handle_at takes"},

		// The kernel keyring is not namespaced.
		{Syscall: "add_key", Reason: "the kernel keyring is shared with the guest's services and not namespaced"},
		{Syscall: "request_key", Reason: "the kernel keyring is shared with the guest's services and not namespaced"},
		{Syscall: "keyctl", Reason: "the kernel keyring is shared with the guest's services and not namespaced"},

		// The mount tree is the sandbox.
		{Syscall: "mount", Reason: "changes the mount tree the sandbox is made of"},
		{Syscall: "umount2", Reason: "uncovers what the sandbox's mounts hide"},
		{Syscall: "pivot_root", Reason: "changes the root the sandbox is made of"},
		{Syscall: "move_mount", Reason: "new mount API: changes the mount tree"},
		{Syscall: "open_tree", Reason: "new mount API: clones mounts"},
		{Syscall: "fsopen", Reason: "new mount API: makes a filesystem to mount"},
		{Syscall: "fsconfig", Reason: "new mount API: configures a filesystem to mount"},
		{Syscall: "fsmount", Reason: "new mount API: makes a mount"},
		{Syscall: "fspick", Reason: "new mount API: reconfigures a mounted filesystem"},
		{Syscall: "mount_setattr", Reason: "new mount API: changes a mount's flags, e.g. read-only"},

		// Machine-wide state.
		{Syscall: "reboot", Reason: "reboots or halts the machine"},
		{Syscall: "swapon", Reason: "adds swap to the whole machine"},
		{Syscall: "swapoff", Reason: "removes swap from the whole machine"},
		{Syscall: "acct", Reason: "switches process accounting of the whole machine"},
		{Syscall: "quotactl", Reason: "changes disk quotas of a filesystem"},
		{Syscall: "quotactl_fd", Reason: "changes disk quotas of a filesystem"},
		{Syscall: "nfsservctl", Reason: "the kernel NFS server's old control call (removed in 3.1)"},
		{Syscall: "vhangup", Reason: "hangs up the terminal"},
		{Syscall: "settimeofday", Reason: "sets the machine's clock, which is not namespaced"},
		{Syscall: "clock_settime", Reason: "sets the machine's clock, which is not namespaced"},
		{Syscall: "clock_adjtime", Reason: "adjusts the machine's clock, which is not namespaced"},
		{Syscall: "adjtimex", Reason: "adjusts the machine's clock (its read-only use cannot be told apart: the mode is in memory)"},
		{Syscall: "iopl", Reason: "raw access to I/O ports"},
		{Syscall: "ioperm", Reason: "raw access to I/O ports"},

		// Namespaces: a run stays in the ones bubblewrap made.
		{Syscall: "setns", Reason: "joins another process's namespaces"},
		{Syscall: "clone3", Action: NoSys, Reason: "its flags are in memory, out of the filter's sight: ENOSYS makes libc fall back to clone(2), whose flags are checked"},
	},
	namespaceRules("clone"),
	namespaceRules("unshare"),
	[]Rule{
		// Docker allows only these personalities (Linux, its 32-bit variant, and the uname
		// 2.6 emulation), and the query; the rest turn hardening off (ADDR_NO_RANDOMIZE,
		// READ_IMPLIES_EXEC, MMAP_PAGE_ZERO).
		{Syscall: "personality", Args: []Arg{
			{Index: 0, Op: Ne, Value: 0x0, Name: "PER_LINUX"},
			{Index: 0, Op: Ne, Value: 0x8, Name: "PER_LINUX32"},
			{Index: 0, Op: Ne, Value: 0x20000, Name: "UNAME26"},
			{Index: 0, Op: Ne, Value: 0x20008, Name: "PER_LINUX32|UNAME26"},
			{Index: 0, Op: Ne, Value: 0xffffffff, Name: "query"},
		}, Reason: "other personalities turn off address randomisation or make data executable"},

		// Sockets.
		{Syscall: "socket", Args: []Arg{{Index: 0, Op: Eq32, Value: unix.AF_VSOCK, Name: "AF_VSOCK"}},
			Reason: "the VM's vsock reaches the host and the kata-agent, which belong to the host, not to a run"},
		{Syscall: "socketpair", Args: []Arg{{Index: 0, Op: Eq32, Value: unix.AF_VSOCK, Name: "AF_VSOCK"}},
			Reason: "the VM's vsock reaches the host and the kata-agent, which belong to the host, not to a run"},

		// Btrfs: the workspace's subvolumes are the daemon's.
		btrfsRule(btrfsSnapCreate, "BTRFS_IOC_SNAP_CREATE", "snapshots a subvolume"),
		btrfsRule(btrfsSnapCreateV2, "BTRFS_IOC_SNAP_CREATE_V2", "snapshots a subvolume"),
		btrfsRule(btrfsSubvolCreate, "BTRFS_IOC_SUBVOL_CREATE", "creates a subvolume"),
		btrfsRule(btrfsSubvolCreateV2, "BTRFS_IOC_SUBVOL_CREATE_V2", "creates a subvolume"),
		btrfsRule(btrfsSnapDestroy, "BTRFS_IOC_SNAP_DESTROY", "deletes a subvolume or snapshot"),
		btrfsRule(btrfsSnapDestroyV2, "BTRFS_IOC_SNAP_DESTROY_V2", "deletes a subvolume or snapshot"),
		btrfsRule(btrfsSubvolSetflags, "BTRFS_IOC_SUBVOL_SETFLAGS", "makes a subvolume or snapshot read-only or writable"),

		// Left allowed on purpose, where Docker denies without a capability.
		{Syscall: "ptrace", Action: Allow, Reason: "debuggers and strace; in the run's PID namespace, with no capability, it reaches only the run's own processes (Docker allows it too on kernels from 4.8)"},
		{Syscall: "process_vm_readv", Action: Allow, Reason: "the same reach as ptrace: the run's own processes"},
		{Syscall: "process_vm_writev", Action: Allow, Reason: "the same reach as ptrace: the run's own processes"},
	},
)

// namespaces are the CLONE_NEW* flags, one rule each for clone and unshare.
var namespaces = []struct {
	flag   uint64
	name   string
	reason string
}{
	{unix.CLONE_NEWUSER, "CLONE_NEWUSER", "a user namespace gives its creator every capability inside, and with it kernel code that is otherwise root's alone"},
	{unix.CLONE_NEWNS, "CLONE_NEWNS", "a mount namespace of its own, the first step to remounting"},
	{unix.CLONE_NEWNET, "CLONE_NEWNET", "a network namespace of its own, outside the network policy of runs"},
	{unix.CLONE_NEWPID, "CLONE_NEWPID", "a PID namespace of its own, out of the process tracker's view"},
	{unix.CLONE_NEWIPC, "CLONE_NEWIPC", "an IPC namespace of its own"},
	{unix.CLONE_NEWUTS, "CLONE_NEWUTS", "a UTS namespace of its own"},
	{unix.CLONE_NEWCGROUP, "CLONE_NEWCGROUP", "a cgroup namespace of its own, hiding its cgroup"},
	// In clone(2) this bit is the exit signal's (signals stop at 64, so the kernel rejects
	// it); it is there to keep the two lists the same.
	{unix.CLONE_NEWTIME, "CLONE_NEWTIME", "a time namespace of its own"},
}

func namespaceRules(syscall string) []Rule {
	rules := make([]Rule, len(namespaces))
	for i, ns := range namespaces {
		rules[i] = Rule{Syscall: syscall, Args: []Arg{{Index: 0, Op: AnyBit, Value: ns.flag, Name: ns.name}}, Reason: ns.reason}
	}
	return rules
}

// btrfsRule denies ioctl(fd, request, ...). The request is an unsigned int in the kernel: only
// its low 32 bits count.
func btrfsRule(request uint64, name, what string) Rule {
	return Rule{Syscall: "ioctl", Args: []Arg{{Index: 1, Op: Eq32, Value: request, Name: name}},
		Reason: what + "; the workspace's subvolumes and snapshots are the daemon's"}
}

func concat(parts ...[]Rule) []Rule {
	var out []Rule
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
