// SPDX-License-Identifier: GPL-2.0
/* A tc classifier reading with bpf_skb_load_bytes (no bounds checks needed), the context's
 * len and protocol, and marking the packet; an out-of-range read gives -EFAULT. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u8 first_bytes[4];
long past_end_err;
__u32 skb_len, skb_protocol;

SEC("tc")
int classify(struct __sk_buff *skb)
{
	__u8 byte;

	if (bpf_skb_load_bytes(skb, 12, first_bytes, sizeof(first_bytes)))
		return 2;	/* TC_ACT_SHOT */
	past_end_err = bpf_skb_load_bytes(skb, skb->len, &byte, 1);
	skb_len = skb->len;
	skb_protocol = skb->protocol;
	skb->mark = first_bytes[3];
	return first_bytes[0] == 0x08 ? 0 : 2;	/* TC_ACT_OK for IPv4/ARP, else SHOT */
}

char LICENSE[] SEC("license") = "GPL";
