// SPDX-License-Identifier: GPL-2.0
/* A flow table: a hash map keyed by a 5-tuple struct with a struct of counters as value,
 * filled by an XDP program that parses Ethernet, IPv4 and UDP. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "packet.h"

struct flow_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u32 proto;
};

struct flow_stats {
	__u64 packets;
	__u64 bytes;
	__u32 first_len;
	__u32 last_len;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, struct flow_key);
	__type(value, struct flow_stats);
} flows SEC(".maps");

SEC("xdp")
int count_flows(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	struct ipv4_hdr *ip = (void *)(eth + 1);
	struct udp_hdr *udp = (void *)(ip + 1);
	struct flow_key key = {};
	struct flow_stats *stats;
	__u32 len = data_end - data;

	if ((void *)(udp + 1) > data_end)
		return XDP_PASS;
	if (eth->proto != be16(ETH_P_IP) || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	key.saddr = ip->saddr;
	key.daddr = ip->daddr;
	key.sport = be16(udp->source);
	key.dport = be16(udp->dest);
	key.proto = ip->protocol;
	stats = bpf_map_lookup_elem(&flows, &key);
	if (!stats) {
		struct flow_stats fresh = { .packets = 1, .bytes = len, .first_len = len,
					    .last_len = len };

		bpf_map_update_elem(&flows, &key, &fresh, BPF_NOEXIST);
		return XDP_PASS;
	}
	stats->packets++;
	stats->bytes += len;
	stats->last_len = len;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
