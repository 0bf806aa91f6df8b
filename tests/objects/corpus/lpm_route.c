// SPDX-License-Identifier: GPL-2.0
/* Longest-prefix-match routing: an LPM trie of IPv4 prefixes filled from user space; the
 * XDP program looks up each packet's destination and counts hits per next hop. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "packet.h"

struct route_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 16);
	__type(key, struct route_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} routes SEC(".maps");

__u32 hops[4];
__u32 no_route;

SEC("xdp")
int route(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	struct ipv4_hdr *ip = (void *)(eth + 1);
	struct route_key key = { .prefixlen = 32 };
	__u32 *hop;

	if ((void *)(ip + 1) > data_end || eth->proto != be16(ETH_P_IP))
		return XDP_PASS;
	__builtin_memcpy(key.addr, &ip->daddr, 4);
	hop = bpf_map_lookup_elem(&routes, &key);
	if (!hop) {
		no_route++;
		return XDP_DROP;
	}
	if (*hop < 4)
		hops[*hop]++;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
