// SPDX-License-Identifier: GPL-2.0
/* Reading past the bounds check: the check covers 14 bytes, the read is at offset 20, so
 * the verifier refuses the load (EACCES, invalid access to packet). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int read_too_far(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if ((void *)(data + 14) > data_end)
		return XDP_DROP;
	return data[20] ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
