// SPDX-License-Identifier: GPL-2.0
/* A loop whose state never changes between iterations: the verifier sees the same state
 * at the back-edge and refuses the load (EINVAL, "infinite loop detected"). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u32 spins;

SEC("xdp")
int spin(struct xdp_md *ctx)
{
	__u32 i = ctx->data_end - ctx->data;

	while (i != 7)
		asm volatile("" : "+r"(i));	/* the compiler may not drop the loop */
	spins++;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
