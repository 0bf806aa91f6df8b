// SPDX-License-Identifier: GPL-2.0
/* An IPv4 header checksum over its ten 16-bit words in an unrolled loop, folded; the
 * program passes packets whose checksum verifies and drops the others. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "packet.h"

__u32 folded;
__u32 checked;

SEC("xdp")
int verify_ip_csum(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	__u16 *words;
	__u32 sum = 0;
	int i;

	if ((void *)(eth + 1) + sizeof(struct ipv4_hdr) > data_end)
		return XDP_ABORTED;
	if (eth->proto != be16(ETH_P_IP))
		return XDP_PASS;
	words = (void *)(eth + 1);
#pragma unroll
	for (i = 0; i < 10; i++)
		sum += words[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	folded = sum;
	checked++;
	return sum == 0xffff ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
