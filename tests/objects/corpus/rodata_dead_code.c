// SPDX-License-Identifier: GPL-2.0
/* A .rodata switch guarding code the verifier would refuse (a packet read with no bounds
 * check): left off, the branch is dead once .rodata is frozen and the load succeeds;
 * turned on before load, the load is refused. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

const volatile __u32 unsafe_read = 0;

SEC("xdp")
int maybe_unsafe(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;

	if (unsafe_read)
		return data[0];
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
