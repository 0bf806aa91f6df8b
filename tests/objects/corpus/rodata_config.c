// SPDX-License-Identifier: GPL-2.0
/* Configuration in .rodata, set before load (libbpf's skel->rodata): a blocked UDP port,
 * a length limit and a switch; the verifier sees the frozen values. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "packet.h"

const volatile __u16 blocked_port = 53;
const volatile __u32 max_len = 1500;
const volatile __u8 count_passed = 0;

__u32 dropped_port, dropped_len, passed;

SEC("xdp")
int filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	struct ipv4_hdr *ip = (void *)(eth + 1);
	struct udp_hdr *udp = (void *)(ip + 1);

	if (data_end - data > max_len) {
		dropped_len++;
		return XDP_DROP;
	}
	if ((void *)(udp + 1) <= data_end && eth->proto == be16(ETH_P_IP) &&
	    ip->protocol == IPPROTO_UDP && udp->dest == be16(blocked_port)) {
		dropped_port++;
		return XDP_DROP;
	}
	if (count_passed)
		passed++;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
