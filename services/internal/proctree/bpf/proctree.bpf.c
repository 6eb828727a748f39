// SPDX-License-Identifier: GPL-2.0
/*
 * proctree: attribute processes to agent runs and report their lineage.
 *
 * A run is registered from user space by inserting its root process, keyed
 * by {tgid, start_time}, into the attr map. Children inherit the attribution
 * at fork. Fork, exec and exit of attributed processes (and only those) are
 * sent to user space through a ring buffer; wake-ups are batched.
 *
 * All kernel structures are read with CO-RE from BTF-typed tracepoints, so
 * no tracepoint field offset is hard-coded.
 */
#include "proctree.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define FILENAME_LEN 256
#define COMM_LEN 16

/* Wake user space every wakeup_batch events per CPU; set by the loader. */
volatile const __u32 wakeup_batch = 64;

enum event_kind {
	EVENT_FORK = 1,
	EVENT_EXEC = 2,
	EVENT_EXIT = 3,
};

enum counter {
	COUNTER_RINGBUF_FULL = 0,
	COUNTER_ATTR_FULL = 1,
	COUNTER_PENDING = 2, /* events submitted without a wake-up, per CPU */
	COUNTER_MAX = 3,
};

struct key {
	__u32 tgid;
	__u32 pad;
	__u64 start_time;
};

struct attr {
	__u64 run_id;
	__u32 root;
	__u32 pad;
};

struct event {
	__u64 run_id;
	__u64 start_time;
	__u64 parent_start_time;
	__u64 cgroup_id;
	__u32 kind;
	__u32 pid;
	__u32 tgid;
	__u32 ppid;
	__s32 exit_code;
	__u32 root;
	char comm[COMM_LEN];
	char filename[FILENAME_LEN];
};

/* Record written by the task iterator: one per live thread-group leader. */
struct task_rec {
	__u32 tgid;
	__u32 ppid;
	__u64 start_time;
};

/* Anchor the record types in BTF so bpf2go emits Go types for them. */
const struct event *unused_event __attribute__((unused));
const struct task_rec *unused_task_rec __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct key);
	__type(value, struct attr);
} attrs SEC(".maps");

/*
 * A record is 336 bytes with its header, so 8 MiB holds about 25,000
 * events: most of a 10,000-process burst (30,000 events) even if user space
 * fell behind for the whole burst.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1;
}

static __always_inline struct key process_key(struct task_struct *t)
{
	struct key k = {};
	k.tgid = BPF_CORE_READ(t, tgid);
	k.start_time = BPF_CORE_READ(t, group_leader, start_time);
	return k;
}

static __always_inline struct event *reserve(struct task_struct *t, const struct attr *a, __u32 kind)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_RINGBUF_FULL);
		return 0;
	}
	e->run_id = a->run_id;
	e->root = a->root;
	e->kind = kind;
	e->pid = BPF_CORE_READ(t, pid);
	e->tgid = BPF_CORE_READ(t, tgid);
	e->ppid = BPF_CORE_READ(t, real_parent, tgid);
	e->start_time = BPF_CORE_READ(t, group_leader, start_time);
	e->parent_start_time = BPF_CORE_READ(t, real_parent, group_leader, start_time);
	e->cgroup_id = bpf_get_current_cgroup_id();
	e->exit_code = 0;
	e->filename[0] = 0;
	BPF_CORE_READ_STR_INTO(&e->comm, t, comm);
	return e;
}

/* submit wakes user space only every wakeup_batch events per CPU, or when forced. */
static __always_inline void submit(struct event *e, bool force)
{
	__u32 idx = COUNTER_PENDING;
	__u64 *pending = bpf_map_lookup_elem(&counters, &idx);
	__u64 flags = BPF_RB_NO_WAKEUP;

	if (pending) {
		*pending += 1;
		if (*pending >= wakeup_batch)
			force = 1;
	}
	if (force) {
		flags = BPF_RB_FORCE_WAKEUP;
		if (pending)
			*pending = 0;
	}
	bpf_ringbuf_submit(e, flags);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(handle_fork, struct task_struct *parent, struct task_struct *child)
{
	/* Threads belong to their process; only new thread groups matter. */
	if (BPF_CORE_READ(child, pid) != BPF_CORE_READ(child, tgid))
		return 0;

	struct key pk = process_key(parent);
	struct attr *pa = bpf_map_lookup_elem(&attrs, &pk);
	if (!pa)
		return 0;

	struct attr ca = { .run_id = pa->run_id };
	struct key ck = {};
	ck.tgid = BPF_CORE_READ(child, tgid);
	ck.start_time = BPF_CORE_READ(child, start_time);
	if (bpf_map_update_elem(&attrs, &ck, &ca, BPF_ANY)) {
		count(COUNTER_ATTR_FULL);
		return 0;
	}

	struct event *e = reserve(child, &ca, EVENT_FORK);
	if (!e)
		return 0;
	submit(e, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(handle_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct key k = process_key(p);
	struct attr *a = bpf_map_lookup_elem(&attrs, &k);
	if (!a)
		return 0;

	struct event *e = reserve(p, a, EVENT_EXEC);
	if (!e)
		return 0;
	bpf_probe_read_kernel_str(&e->filename, sizeof(e->filename), BPF_CORE_READ(bprm, filename));
	submit(e, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(handle_exit, struct task_struct *p)
{
	/* Report the process once, when its last thread exits. */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;

	struct key k = process_key(p);
	struct attr *a = bpf_map_lookup_elem(&attrs, &k);
	if (!a)
		return 0;

	struct attr copy = *a;
	bpf_map_delete_elem(&attrs, &k);

	struct event *e = reserve(p, &copy, EVENT_EXIT);
	if (!e)
		return 0;
	e->exit_code = BPF_CORE_READ(p, exit_code);
	submit(e, copy.root);
	return 0;
}

SEC("iter/task")
int dump_tasks(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	if (!t)
		return 0;
	/* Leaders only, and no zombies: they would never exit again. */
	if (t->pid != t->tgid || t->exit_state)
		return 0;

	struct task_rec r = {};
	r.tgid = t->tgid;
	r.ppid = BPF_CORE_READ(t, real_parent, tgid);
	r.start_time = t->start_time;
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}
