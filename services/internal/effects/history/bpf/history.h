/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Minimal hand-written kernel types for history.bpf.c. Every struct is
 * marked preserve_access_index, so field offsets are relocated by CO-RE
 * against the running kernel's BTF at load time. struct pt_regs is the
 * x86-64 one: the recorder supports amd64 only (as the guest kernel).
 */
#ifndef HISTORY_H
#define HISTORY_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef int pid_t;
typedef _Bool bool;

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

typedef struct {
	int counter;
} atomic_t;

struct pt_regs {
	unsigned long r10;
	unsigned long r9;
	unsigned long r8;
	unsigned long dx;
	unsigned long si;
	unsigned long di;
	unsigned long orig_ax;
};

struct kernfs_node {
	__u64 id;
};

struct cgroup {
	int level;
	struct kernfs_node *kn;
	struct cgroup *ancestors[];
};

struct css_set {
	struct cgroup *dfl_cgrp;
};

struct signal_struct {
	atomic_t live;
};

struct task_struct {
	pid_t pid;
	pid_t tgid;
	int exit_state;
	int exit_code;
	__u64 start_time;
	struct task_struct *real_parent;
	struct task_struct *group_leader;
	struct signal_struct *signal;
	struct css_set *cgroups;
	char comm[16];
};

struct linux_binprm {
	const char *filename;
};

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
};

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
};

#pragma clang attribute pop

#endif
