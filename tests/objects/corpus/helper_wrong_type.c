// SPDX-License-Identifier: GPL-2.0
/* A socket filter calling an XDP-only helper: the helper is not in the socket filter's
 * set, so the load is refused (EINVAL, "program of this type cannot use helper"). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("socket")
int wrong_helper(struct __sk_buff *skb)
{
	return bpf_xdp_adjust_head((struct xdp_md *)skb, 4) ? 0 : skb->len;
}

char LICENSE[] SEC("license") = "GPL";
