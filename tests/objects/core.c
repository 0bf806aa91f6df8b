// SPDX-License-Identifier: GPL-2.0
/* CO-RE: field offsets, sizes and existence, type existence and size, enum values,
 * resolved against a target BTF. The local types carry only what the program uses (the
 * ___flavor suffix is ignored when matching); the target supplies the real layout. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

struct task_struct {
	int pid;
	int tgid;
	unsigned int flags;
} __attribute__((preserve_access_index));

struct task_struct___old {
	int pid;
	long field_that_never_existed;
} __attribute__((preserve_access_index));

enum bpf_map_type___local {
	BPF_MAP_TYPE_HASH___local = 1,
	BPF_MAP_TYPE_LPM_TRIE___local = 99,
};

/* The XDP context as the program sees it, declared out of order: CO-RE puts each field
 * back where the target says it is. */
struct xdp_md___reordered {
	__u32 ingress_ifindex;
	__u32 data_end;
	__u32 data;
} __attribute__((preserve_access_index));

__u64 facts[6];

SEC("raw_tp/sys_enter")
int task_facts(void *ctx)
{
	facts[0] = bpf_core_field_offset(struct task_struct, tgid);
	facts[1] = bpf_core_field_size(struct task_struct, flags);
	facts[2] = bpf_core_field_exists(struct task_struct___old, field_that_never_existed);
	facts[3] = bpf_core_type_exists(struct task_struct);
	facts[4] = bpf_core_type_size(struct task_struct);
	facts[5] = bpf_core_enum_value(enum bpf_map_type___local, BPF_MAP_TYPE_LPM_TRIE___local);
	return 0;
}

SEC("xdp")
int packet_length(struct xdp_md___reordered *ctx)
{
	return ctx->data_end - ctx->data;
}

char LICENSE[] SEC("license") = "GPL";
