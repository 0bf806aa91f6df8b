// SPDX-License-Identifier: GPL-2.0
/* CO-RE reads of __sk_buff fields through a local flavor declared out of order, and
 * bpf_core_field_exists on a field the kernel has and one it does not. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

struct __sk_buff___mine {
	__u32 protocol;
	__u32 mark;
	__u32 len;
	__u32 ifindex_that_is_not_there;
	__u32 priority;
} __attribute__((preserve_access_index));

__u32 seen[6];

SEC("tc")
int read_skb(struct __sk_buff___mine *skb)
{
	seen[0] = skb->len;
	seen[1] = skb->protocol;
	seen[2] = skb->mark;
	seen[3] = skb->priority;
	seen[4] = bpf_core_field_exists(skb->priority);
	seen[5] = bpf_core_field_exists(skb->ifindex_that_is_not_there);
	return seen[0] > 40 ? 1 : 0;
}

char LICENSE[] SEC("license") = "GPL";
