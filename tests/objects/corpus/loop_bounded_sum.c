// SPDX-License-Identifier: GPL-2.0
/* A bounded for loop over packet bytes, each access checked against data_end in the loop
 * (the verifier walks every iteration). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u64 byte_sum;
__u32 bytes_seen;

SEC("xdp")
int sum_bytes(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	int i;

	byte_sum = 0;
	bytes_seen = 0;
	for (i = 0; i < 32; i++) {
		if ((void *)(data + i + 1) > data_end)
			break;
		byte_sum += data[i];
		bytes_seen++;
	}
	return byte_sum & 1 ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
