// SPDX-License-Identifier: GPL-2.0
/* XDP parsing with a bounds check before each header: Ethernet, IPv4 with options (the
 * header length from ihl), UDP. Verdicts and reasons are counted per packet. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "packet.h"

enum verdict_reason { TRUNCATED_ETH, NOT_IP, TRUNCATED_IP, BAD_IHL, NOT_UDP, TRUNCATED_UDP,
		      UDP_OK, NR_REASONS };

__u32 reasons[NR_REASONS];
__u16 last_dport;

static __always_inline int parse(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	struct ipv4_hdr *ip;
	struct udp_hdr *udp;
	__u32 ihl;

	if ((void *)(eth + 1) > data_end)
		return TRUNCATED_ETH;
	if (eth->proto != be16(ETH_P_IP))
		return NOT_IP;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return TRUNCATED_IP;
	ihl = ip->ver_ihl & 0x0f;
	if (ihl < 5)
		return BAD_IHL;
	if ((void *)ip + ihl * 4 > data_end)
		return TRUNCATED_IP;
	if (ip->protocol != IPPROTO_UDP)
		return NOT_UDP;
	udp = (void *)ip + ihl * 4;
	if ((void *)(udp + 1) > data_end)
		return TRUNCATED_UDP;
	last_dport = be16(udp->dest);
	return UDP_OK;
}

SEC("xdp")
int parse_udp(struct xdp_md *ctx)
{
	int reason = parse(ctx);

	if (reason >= 0 && reason < NR_REASONS)
		reasons[reason]++;
	return reason == UDP_OK ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
