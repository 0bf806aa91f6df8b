// SPDX-License-Identifier: GPL-2.0
/* CO-RE questions about the context types (uapi structs in the kernel's BTF): type
 * existence and size, field existence, offset and size, through local flavors that name
 * only what they ask about; resolved at load into constants the program stores. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

struct xdp_md___probe {
	__u32 data_end;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
	__u32 no_such_field;
} __attribute__((preserve_access_index));

struct __sk_buff___probe {
	__u32 mark;
	__u32 data;
	__u64 tstamp;
} __attribute__((preserve_access_index));

struct pybpf_corpus_absent {
	int x;
} __attribute__((preserve_access_index));

__u64 answers[9];

SEC("xdp")
int ask(struct xdp_md *ctx)
{
	answers[0] = bpf_core_type_exists(struct xdp_md___probe);
	answers[1] = bpf_core_type_exists(struct pybpf_corpus_absent);
	answers[2] = bpf_core_type_size(struct xdp_md___probe);
	answers[3] = bpf_core_field_exists(struct xdp_md___probe, egress_ifindex);
	answers[4] = bpf_core_field_exists(struct xdp_md___probe, no_such_field);
	answers[5] = bpf_core_field_offset(struct xdp_md___probe, rx_queue_index);
	answers[6] = bpf_core_field_offset(struct __sk_buff___probe, data);
	answers[7] = bpf_core_field_size(struct __sk_buff___probe, tstamp);
	answers[8] = bpf_core_field_offset(struct __sk_buff___probe, mark);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
