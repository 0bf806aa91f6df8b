// SPDX-License-Identifier: GPL-2.0
/* A program that tail calls itself: the kernel allows 33 tail calls per run
 * (MAX_TAIL_CALL_CNT), so it runs 34 times and the last call falls through. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u32 depth;
__u32 fell_through;

int recurse(struct __sk_buff *skb);

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__array(values, int (void *));
} self SEC(".maps") = {
	.values = { [0] = (void *)&recurse },
};

SEC("tc")
int recurse(struct __sk_buff *skb)
{
	depth++;
	bpf_tail_call(skb, &self, 0);
	fell_through++;
	return depth;
}

char LICENSE[] SEC("license") = "GPL";
