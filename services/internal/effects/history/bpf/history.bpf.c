// SPDX-License-Identifier: GPL-2.0
/*
 * history: the observer's syscall, object and process history of one
 * session cgroup.
 *
 * Only tasks whose cgroup (v2) is the session cgroup or below it are
 * recorded: scope_id and scope_level are set by the loader. Fork, exec and
 * exit come from the BTF-typed sched tracepoints. Syscalls come from the
 * raw_syscalls sys_enter/sys_exit tracepoints: the descs map (filled by the
 * loader, indexed by syscall number) says which syscalls to record, which
 * argument filters them (openat only with write, create or truncate flags)
 * and which arguments are strings. sys_enter saves the arguments per thread
 * in inflight; sys_exit pairs them with the return value, reads the strings
 * (after the kernel has faulted them in) and submits one record. A thread
 * that exits inside a recorded syscall (exit never returns) is submitted
 * with EV_NORETURN. Every record that cannot be submitted is counted per
 * CPU in counters. The task iterator lists the processes already in scope.
 */
#include "history.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define NARGS 6
#define NSTR 3
#define STR_LEN 256
#define COMM_LEN 16
#define MAX_SYSCALL 512

/* Set by the loader. */
volatile const __u64 scope_id = 0;
volatile const __u32 scope_level = 0;
volatile const __u32 wakeup_batch = 64;

enum event_kind {
	KIND_SYSCALL = 1,
	KIND_FORK = 2,
	KIND_EXEC = 3,
	KIND_EXIT = 4,
};

enum event_flag {
	EV_NORETURN = 1,
	EV_TRUNC0 = 2,  /* string k filled its buffer: EV_TRUNC0 << k */
	EV_FAULT0 = 16, /* string k could not be read: EV_FAULT0 << k */
};

enum counter {
	COUNTER_RINGBUF_FULL = 0,
	COUNTER_PENDING_FULL = 1,
	COUNTER_UNSENT = 2, /* records submitted without a wake-up */
	COUNTER_MAX = 3,
};

/* How to record one syscall; indexes are argument index + 1, 0 is none. */
struct desc {
	__u64 filter_mask;     /* record only if the filter value has one of these bits */
	__u8 on;               /* record this syscall */
	__u8 filter_arg;       /* argument holding the filter value */
	__u8 filter_indirect;  /* the filter value is the u64 at that user address */
	__u8 str_arg[NSTR];    /* arguments that point to strings */
	__u8 len_arg[NSTR];    /* argument holding string k's length; 0: NUL-terminated */
	__u8 pad[7];
};

struct pending {
	__u64 ts;
	__u64 args[NARGS];
	__u32 nr;
	__u32 pad;
};

struct event {
	__u64 ts;
	__u64 start_time;
	__u64 cgroup_id;
	__u64 args[NARGS];
	__s64 ret;
	__u64 indirect;
	__u32 kind;
	__u32 nr;
	__u32 pid;
	__u32 tgid;
	__u32 ppid;
	__s32 exit_code;
	__u32 flags;
	__u32 pad;
	char comm[COMM_LEN];
	char str[NSTR][STR_LEN];
};

/* Record written by the task iterator: one per process in scope at Start. */
struct task_rec {
	__u64 start_time;
	__u64 cgroup_id;
	__u32 tgid;
	__u32 ppid;
	char comm[COMM_LEN];
};

const struct event *unused_event __attribute__((unused));
const struct task_rec *unused_task_rec __attribute__((unused));
const struct desc *unused_desc __attribute__((unused));
const struct pending *unused_pending __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SYSCALL);
	__type(key, __u32);
	__type(value, struct desc);
} descs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct pending);
} inflight SEC(".maps");

/* A record is 912 bytes with its header: 16 MiB holds about 18,000. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
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

static __always_inline bool current_in_scope(void)
{
	return bpf_get_current_ancestor_cgroup_id(scope_level) == scope_id;
}

/* task_in_scope reads t's cgroup, for a task other than current. */
static __always_inline bool task_in_scope(struct task_struct *t)
{
	struct cgroup *cg = BPF_CORE_READ(t, cgroups, dfl_cgrp);
	struct cgroup *anc = 0;
	__u32 level = scope_level;

	if (!cg || BPF_CORE_READ(cg, level) < (int)level)
		return 0;
	if (bpf_core_read(&anc, sizeof(anc), &cg->ancestors[level]) || !anc)
		return 0;
	return BPF_CORE_READ(anc, kn, id) == scope_id;
}

static __always_inline struct event *reserve(struct task_struct *t, __u32 kind)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_RINGBUF_FULL);
		return 0;
	}
	e->ts = bpf_ktime_get_ns();
	e->kind = kind;
	e->nr = 0;
	e->pid = BPF_CORE_READ(t, pid);
	e->tgid = BPF_CORE_READ(t, tgid);
	e->ppid = BPF_CORE_READ(t, real_parent, tgid);
	e->start_time = BPF_CORE_READ(t, group_leader, start_time);
	e->cgroup_id = bpf_get_current_cgroup_id();
	e->ret = 0;
	e->indirect = 0;
	e->exit_code = 0;
	e->flags = 0;
	e->pad = 0;
#pragma unroll
	for (int i = 0; i < NARGS; i++)
		e->args[i] = 0;
#pragma unroll
	for (int k = 0; k < NSTR; k++)
		e->str[k][0] = 0;
	BPF_CORE_READ_STR_INTO(&e->comm, t, comm);
	return e;
}

/* submit wakes user space only every wakeup_batch records per CPU. */
static __always_inline void submit(struct event *e)
{
	__u32 idx = COUNTER_UNSENT;
	__u64 *unsent = bpf_map_lookup_elem(&counters, &idx);
	__u64 flags = BPF_RB_NO_WAKEUP;

	if (unsent) {
		*unsent += 1;
		if (*unsent >= wakeup_batch) {
			flags = BPF_RB_FORCE_WAKEUP;
			*unsent = 0;
		}
	}
	bpf_ringbuf_submit(e, flags);
}

static __always_inline __u64 arg(const struct pending *p, __u8 idx)
{
	if (idx == 0 || idx > NARGS)
		return 0;
	return p->args[idx - 1];
}

static __always_inline void read_strings(struct event *e, const struct pending *p, const struct desc *d)
{
#pragma unroll
	for (int k = 0; k < NSTR; k++) {
		__u8 a = d->str_arg[k];
		if (a == 0 || a > NARGS)
			continue;
		const void *src = (const void *)arg(p, a);
		if (!src)
			continue;
		long n;
		if (d->len_arg[k]) {
			__u64 len = arg(p, d->len_arg[k]);
			if (len > STR_LEN - 1) {
				len = STR_LEN - 1;
				e->flags |= EV_TRUNC0 << k;
			}
			n = bpf_probe_read_user(e->str[k], len & (STR_LEN - 1), src);
			e->str[k][len & (STR_LEN - 1)] = 0;
		} else {
			n = bpf_probe_read_user_str(e->str[k], STR_LEN, src);
			if (n == STR_LEN)
				e->flags |= EV_TRUNC0 << k;
		}
		if (n < 0) {
			e->str[k][0] = 0;
			e->flags |= EV_FAULT0 << k;
		}
	}
}

/* emit submits the record of a syscall that returned ret (or never returned). */
static __always_inline void emit(const struct pending *p, long ret, __u32 flags)
{
	__u32 nr = p->nr;
	struct desc *d = bpf_map_lookup_elem(&descs, &nr);
	if (!d)
		return;

	__u64 indirect = 0;
	if (d->filter_indirect) {
		const void *src = (const void *)arg(p, d->filter_arg);
		if (src && bpf_probe_read_user(&indirect, sizeof(indirect), src) == 0 &&
		    !(indirect & d->filter_mask))
			return;
	}

	struct task_struct *t = bpf_get_current_task_btf();
	struct event *e = reserve(t, KIND_SYSCALL);
	if (!e)
		return;
	e->ts = p->ts;
	e->nr = nr;
	e->ret = ret;
	e->indirect = indirect;
	e->flags = flags;
#pragma unroll
	for (int i = 0; i < NARGS; i++)
		e->args[i] = p->args[i];
	read_strings(e, p, d);
	submit(e);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
	if (id < 0 || id >= MAX_SYSCALL)
		return 0;
	__u32 nr = id;
	struct desc *d = bpf_map_lookup_elem(&descs, &nr);
	if (!d || !d->on)
		return 0;
	if (!current_in_scope())
		return 0;

	struct pending p = {};
	p.ts = bpf_ktime_get_ns();
	p.nr = nr;
	p.args[0] = regs->di;
	p.args[1] = regs->si;
	p.args[2] = regs->dx;
	p.args[3] = regs->r10;
	p.args[4] = regs->r8;
	p.args[5] = regs->r9;
	if (d->filter_arg && !d->filter_indirect && !(arg(&p, d->filter_arg) & d->filter_mask))
		return 0;

	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	if (bpf_map_update_elem(&inflight, &tid, &p, BPF_ANY))
		count(COUNTER_PENDING_FULL);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	long id = regs->orig_ax;
	if (id < 0 || id >= MAX_SYSCALL)
		return 0;
	__u32 nr = id;
	struct desc *d = bpf_map_lookup_elem(&descs, &nr);
	if (!d || !d->on)
		return 0;

	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct pending *p = bpf_map_lookup_elem(&inflight, &tid);
	if (!p)
		return 0;
	if (p->nr == nr)
		emit(p, ret, 0);
	bpf_map_delete_elem(&inflight, &tid);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(handle_fork, struct task_struct *parent, struct task_struct *child)
{
	/* Threads belong to their process; only new thread groups matter. */
	if (BPF_CORE_READ(child, pid) != BPF_CORE_READ(child, tgid))
		return 0;
	if (!current_in_scope() && !task_in_scope(child))
		return 0;

	struct event *e = reserve(child, KIND_FORK);
	if (!e)
		return 0;
	/* The record describes the child: its cgroup, not the parent's (they
	 * differ after CLONE_INTO_CGROUP). args[0] is the parent's start time. */
	e->cgroup_id = BPF_CORE_READ(child, cgroups, dfl_cgrp, kn, id);
	e->args[0] = BPF_CORE_READ(parent, group_leader, start_time);
	e->start_time = BPF_CORE_READ(child, start_time);
	submit(e);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(handle_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	if (!current_in_scope())
		return 0;
	struct event *e = reserve(p, KIND_EXEC);
	if (!e)
		return 0;
	e->args[0] = old_pid;
	if (bpf_probe_read_kernel_str(&e->str[0], STR_LEN, BPF_CORE_READ(bprm, filename)) == STR_LEN)
		e->flags |= EV_TRUNC0;
	submit(e);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(handle_exit, struct task_struct *p)
{
	if (!current_in_scope())
		return 0;

	/* A thread that exits inside a recorded syscall: it never returns. */
	__u32 tid = BPF_CORE_READ(p, pid);
	struct pending *pd = bpf_map_lookup_elem(&inflight, &tid);
	if (pd) {
		emit(pd, 0, EV_NORETURN);
		bpf_map_delete_elem(&inflight, &tid);
	}

	/* Report the process once, when its last thread exits. */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	struct event *e = reserve(p, KIND_EXIT);
	if (!e)
		return 0;
	e->exit_code = BPF_CORE_READ(p, exit_code);
	submit(e);
	return 0;
}

SEC("iter/task")
int dump_tasks(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	if (!t)
		return 0;
	/* Leaders only, and no zombies: they will not exit again. */
	if (t->pid != t->tgid || t->exit_state || !task_in_scope(t))
		return 0;

	struct task_rec r = {};
	r.tgid = t->tgid;
	r.ppid = BPF_CORE_READ(t, real_parent, tgid);
	r.start_time = t->start_time;
	r.cgroup_id = BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
	BPF_CORE_READ_STR_INTO(&r.comm, t, comm);
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}
