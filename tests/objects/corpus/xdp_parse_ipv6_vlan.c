// SPDX-License-Identifier: GPL-2.0
/* XDP parsing of up to two VLAN tags (a bounded loop), then IPv6 and TCP: SYN packets to
 * each destination port are counted in a hash map; the VLAN depth goes to .bss. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "packet.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u16);
	__type(value, __u32);
} syns SEC(".maps");

__u32 vlan_depth;

SEC("xdp")
int count_syns(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	void *cursor = eth + 1;
	struct ipv6_hdr *ip6;
	struct tcp_hdr *tcp;
	__u16 proto, port;
	__u32 one = 1, *count;
	int i;

	if (cursor > data_end)
		return XDP_DROP;
	proto = eth->proto;
	vlan_depth = 0;
	for (i = 0; i < 2; i++) {
		struct vlan_hdr *vlan = cursor;

		if (proto != be16(ETH_P_8021Q))
			break;
		if ((void *)(vlan + 1) > data_end)
			return XDP_DROP;
		proto = vlan->proto;
		cursor = vlan + 1;
		vlan_depth++;
	}
	if (proto != be16(ETH_P_IPV6))
		return XDP_PASS;
	ip6 = cursor;
	if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_TCP)
		return XDP_PASS;
	tcp = (void *)(ip6 + 1);
	if ((void *)(tcp + 1) > data_end)
		return XDP_DROP;
	if ((tcp->flags & 0x12) != 0x02)	/* SYN without ACK */
		return XDP_PASS;
	port = be16(tcp->dest);
	count = bpf_map_lookup_elem(&syns, &port);
	if (count)
		(*count)++;
	else
		bpf_map_update_elem(&syns, &port, &one, BPF_ANY);
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
