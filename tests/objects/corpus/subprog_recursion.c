// SPDX-License-Identifier: GPL-2.0
/* A static subprogram that calls itself (not in tail position, so clang keeps the call):
 * the verifier refuses recursion when it checks the call graph (EINVAL, "recursive
 * call"). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u32 depth_seen[4];

static __noinline __u32 countdown(__u32 n)
{
	__u32 below;

	if (n == 0)
		return 0;
	below = countdown(n - 1);
	depth_seen[below & 3]++;
	return below + 1;
}

SEC("xdp")
int recurse_static(struct xdp_md *ctx)
{
	return countdown(ctx->data_end - ctx->data) ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
