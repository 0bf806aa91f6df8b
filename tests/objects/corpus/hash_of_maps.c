// SPDX-License-Identifier: GPL-2.0
/* A hash of maps keyed by a port: each port's inner hash counts packets per source
 * address. The inner maps are created by the loader (initial contents). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "packet.h"

struct per_source {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} dns_sources SEC(".maps"), ntp_sources SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 128);	/* initial-content slots are keys: 123 must fit */
	__type(key, __u32);
	__array(values, struct per_source);
} by_port SEC(".maps") = {
	.values = { [53] = &dns_sources, [123] = &ntp_sources },
};

SEC("xdp")
int count_sources(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	struct ipv4_hdr *ip = (void *)(eth + 1);
	struct udp_hdr *udp = (void *)(ip + 1);
	__u64 one = 1, *count;
	__u32 port, saddr;
	void *inner;

	if ((void *)(udp + 1) > data_end || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	port = be16(udp->dest);
	saddr = ip->saddr;
	inner = bpf_map_lookup_elem(&by_port, &port);
	if (!inner)
		return XDP_DROP;
	count = bpf_map_lookup_elem(inner, &saddr);
	if (count)
		*count += 1;
	else
		bpf_map_update_elem(inner, &saddr, &one, BPF_NOEXIST);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
