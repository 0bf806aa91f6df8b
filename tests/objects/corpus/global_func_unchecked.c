// SPDX-License-Identifier: GPL-2.0
/* A global function that writes through its pointer argument without a NULL check: verified
 * on its own, the argument may be NULL, so the load is refused (EACCES). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__noinline int store(__u64 *out, __u64 value)
{
	*out = value;
	return 0;
}

SEC("xdp")
int caller(struct xdp_md *ctx)
{
	__u64 slot = 0;

	store(&slot, 1);
	return slot == 1 ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
