/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Minimal hand-written UAPI types for netguard.bpf.c. struct bpf_sock_addr
 * is the stable context of cgroup sock_addr programs (include/uapi/linux/
 * bpf.h); the verifier rewrites every access to it, so no CO-RE is needed.
 * Only the fields up to protocol are declared: the program reads no others.
 */
#ifndef NETGUARD_H
#define NETGUARD_H

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

enum bpf_map_type {
	BPF_MAP_TYPE_ARRAY = 2,
};

/* Map flag: programs may only read the map. */
#define BPF_F_RDONLY_PROG (1U << 7)

struct bpf_sock_addr {
	__u32 user_family;
	__u32 user_ip4;		/* network byte order */
	__u32 user_ip6[4];	/* network byte order */
	__u32 user_port;	/* network byte order, in the low 16 bits */
	__u32 family;
	__u32 type;
	__u32 protocol;
};

#endif
