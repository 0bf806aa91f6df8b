// SPDX-License-Identifier: GPL-2.0
/* Global (non-static) functions: each is verified once on its own, from its BTF
 * signature, not in the caller's state: a context argument, a scalar, and a pointer to
 * memory that may be NULL (so it is checked). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u64 results[4];

__noinline int packet_length(struct xdp_md *ctx)
{
	return ctx->data_end - ctx->data;
}

__noinline int clamp(int value, int low, int high)
{
	if (value < low)
		return low;
	return value > high ? high : value;
}

__noinline int accumulate(__u64 *total, __u64 amount)
{
	if (!total)
		return -1;
	*total += amount;
	return 0;
}

SEC("xdp")
int use_globals(struct xdp_md *ctx)
{
	__u64 total = 100;
	int len = packet_length(ctx);

	results[0] = len;
	results[1] = clamp(len, 16, 48);
	results[2] = accumulate(&total, len);
	results[3] = total + accumulate(0, 1);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
