// SPDX-License-Identifier: GPL-2.0
/*
 * netguard: keep the processes of a cgroup subtree away from protected ports.
 *
 * Six cgroup sock_addr programs (connect, UDP sendmsg and bind, IPv4 and
 * IPv6) refuse any destination port, or port to bind, that is in the
 * protected set, whatever the address: 127.0.0.1, all of 127/8, ::1,
 * ::ffff:127.0.0.1, 0.0.0.0, the machine's own addresses and any name that
 * resolves to them. A refusal (return 0) fails the syscall with EPERM;
 * everything else is allowed (return 1).
 *
 * The set is a bitmap of all 65536 ports in an array map, 64 ports a word,
 * filled and frozen by the loader before the programs are attached.
 */
#include "netguard.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

#define ALLOW 1
#define DENY 0
#define PORT_WORDS (65536 / 64)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PORT_WORDS);
	__uint(map_flags, BPF_F_RDONLY_PROG);
	__type(key, __u32);
	__type(value, __u64);
} protected_ports SEC(".maps");

static __always_inline int verdict(__u32 user_port)
{
	__u32 port = bpf_ntohs((__u16)user_port);
	__u32 word = port / 64;
	__u64 *bits = bpf_map_lookup_elem(&protected_ports, &word);

	if (!bits) /* cannot happen: word < PORT_WORDS; fail closed */
		return DENY;
	return (*bits >> (port % 64)) & 1 ? DENY : ALLOW;
}

/* connect(2) of TCP (also sendto with MSG_FASTOPEN), UDP and ICMP sockets. */
SEC("cgroup/connect4")
int ng_connect4(struct bpf_sock_addr *ctx)
{
	return verdict(ctx->user_port);
}

/* connect(2) on IPv6 sockets, including to IPv4-mapped addresses. */
SEC("cgroup/connect6")
int ng_connect6(struct bpf_sock_addr *ctx)
{
	return verdict(ctx->user_port);
}

/* sendto/sendmsg with an address on unconnected UDP sockets. */
SEC("cgroup/sendmsg4")
int ng_sendmsg4(struct bpf_sock_addr *ctx)
{
	return verdict(ctx->user_port);
}

SEC("cgroup/sendmsg6")
int ng_sendmsg6(struct bpf_sock_addr *ctx)
{
	return verdict(ctx->user_port);
}

/* bind(2): a run must not squat a protected port on any address. */
SEC("cgroup/bind4")
int ng_bind4(struct bpf_sock_addr *ctx)
{
	return verdict(ctx->user_port);
}

SEC("cgroup/bind6")
int ng_bind6(struct bpf_sock_addr *ctx)
{
	return verdict(ctx->user_port);
}
