/* Packet parsing the modern way: bpftool's vmlinux.h (every struct preserve_access_index, so
 * every field read below is a CO-RE relocation) and each header the emulated kernel's BTF
 * describes, read field by field into one global struct that a test compares between
 * backends. The fields only newer kernels have (tcphdr.ae, iphdr/ipv6hdr addrs) are read
 * through local flavors, so the source compiles against any vmlinux.h. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#define ETH_P_IP 0x0800
#define ETH_P_ARP 0x0806
#define ETH_P_8021Q 0x8100
#define ETH_P_IPV6 0x86DD
#define PROTO_ICMP 1
#define PROTO_TCP 6
#define PROTO_UDP 17
#define PROTO_ICMPV6 58

struct iphdr___addrs {
	struct { __be32 saddr; __be32 daddr; } addrs;
} __attribute__((preserve_access_index));

struct ipv6hdr___addrs {
	struct { struct in6_addr saddr; struct in6_addr daddr; } addrs;
} __attribute__((preserve_access_index));

struct tcphdr___ae {
	__u16 ae: 1;
} __attribute__((preserve_access_index));

struct parsed {
	__u32 eth_proto, eth_dest0, eth_source5;
	__u32 vlan_tci, vlan_proto;
	__u32 ip_ihl, ip_version, ip_tos, ip_tot_len, ip_id, ip_frag_off, ip_ttl, ip_protocol,
	      ip_check, ip_saddr, ip_daddr, ip_addrs_daddr, ip_csum;
	__u32 ip6_priority, ip6_version, ip6_flow_lbl0, ip6_flow_lbl2, ip6_payload_len,
	      ip6_nexthdr, ip6_hop_limit, ip6_saddr32_0, ip6_daddr8_15, ip6_addrs_daddr16_7;
	__u32 tcp_source, tcp_dest, tcp_seq, tcp_ack_seq, tcp_doff, tcp_res1, tcp_ae, tcp_flags,
	      tcp_window, tcp_check, tcp_urg_ptr;
	__u32 udp_source, udp_dest, udp_len, udp_check;
	__u32 icmp_type, icmp_code, icmp_checksum, icmp_echo_id, icmp_echo_sequence,
	      icmp_gateway;
	__u32 icmp6_type, icmp6_code, icmp6_cksum, icmp6_identifier, icmp6_sequence,
	      icmp6_data32, icmp6_router, icmp6_solicited, icmp6_override;
	__u32 arp_hrd, arp_pro, arp_hln, arp_pln, arp_op;
	__u32 sizes, exists;
};

struct parsed parsed;

static __always_inline int parse_l4(void *l4, void *end, __u8 proto)
{
	if (proto == PROTO_TCP) {
		struct tcphdr *tcp = l4;
		if ((void *)(tcp + 1) > end)
			return 1;
		parsed.tcp_source = bpf_ntohs(tcp->source);
		parsed.tcp_dest = bpf_ntohs(tcp->dest);
		parsed.tcp_seq = bpf_ntohl(tcp->seq);
		parsed.tcp_ack_seq = bpf_ntohl(tcp->ack_seq);
		parsed.tcp_doff = tcp->doff;
		parsed.tcp_res1 = tcp->res1;
		if (bpf_core_field_exists(((struct tcphdr___ae *)tcp)->ae))
			parsed.tcp_ae = ((struct tcphdr___ae *)tcp)->ae;
		parsed.tcp_flags = tcp->fin | tcp->syn << 1 | tcp->rst << 2 | tcp->psh << 3 |
				   tcp->ack << 4 | tcp->urg << 5 | tcp->ece << 6 | tcp->cwr << 7;
		parsed.tcp_window = bpf_ntohs(tcp->window);
		parsed.tcp_check = tcp->check;
		parsed.tcp_urg_ptr = bpf_ntohs(tcp->urg_ptr);
	} else if (proto == PROTO_UDP) {
		struct udphdr *udp = l4;
		if ((void *)(udp + 1) > end)
			return 1;
		parsed.udp_source = bpf_ntohs(udp->source);
		parsed.udp_dest = bpf_ntohs(udp->dest);
		parsed.udp_len = bpf_ntohs(udp->len);
		parsed.udp_check = udp->check;
	} else if (proto == PROTO_ICMP) {
		struct icmphdr *icmp = l4;
		if ((void *)(icmp + 1) > end)
			return 1;
		parsed.icmp_type = icmp->type;
		parsed.icmp_code = icmp->code;
		parsed.icmp_checksum = icmp->checksum;
		parsed.icmp_echo_id = bpf_ntohs(icmp->un.echo.id);
		parsed.icmp_echo_sequence = bpf_ntohs(icmp->un.echo.sequence);
		parsed.icmp_gateway = bpf_ntohl(icmp->un.gateway);
	} else if (proto == PROTO_ICMPV6) {
		struct icmp6hdr *icmp6 = l4;
		if ((void *)(icmp6 + 1) > end)
			return 1;
		parsed.icmp6_type = icmp6->icmp6_type;
		parsed.icmp6_code = icmp6->icmp6_code;
		parsed.icmp6_cksum = icmp6->icmp6_cksum;
		parsed.icmp6_identifier = bpf_ntohs(icmp6->icmp6_dataun.u_echo.identifier);
		parsed.icmp6_sequence = bpf_ntohs(icmp6->icmp6_dataun.u_echo.sequence);
		parsed.icmp6_data32 = bpf_ntohl(icmp6->icmp6_dataun.un_data32[0]);
		parsed.icmp6_router = icmp6->icmp6_dataun.u_nd_advt.router;
		parsed.icmp6_solicited = icmp6->icmp6_dataun.u_nd_advt.solicited;
		parsed.icmp6_override = icmp6->icmp6_dataun.u_nd_advt.override;
	}
	return 0;
}

static __always_inline int parse(void *data, void *end)
{
	struct ethhdr *eth = data;
	__u16 proto;

	__builtin_memset(&parsed, 0, sizeof(parsed));
	parsed.sizes = bpf_core_type_size(struct ethhdr) | bpf_core_type_size(struct iphdr) << 8 |
		       bpf_core_type_size(struct ipv6hdr) << 16 |
		       bpf_core_field_size(struct iphdr, saddr) << 24;
	parsed.exists = bpf_core_type_exists(struct vlan_hdr) |
			bpf_core_type_exists(struct arphdr) << 1 |
			bpf_core_field_exists(struct icmp6hdr, icmp6_dataun) << 2 |
			bpf_core_field_offset(struct ipv6hdr, daddr) << 8 |
			bpf_core_field_offset(struct tcphdr, window) << 16;
	if ((void *)(eth + 1) > end)
		return 1;
	parsed.eth_dest0 = eth->h_dest[0];
	parsed.eth_source5 = eth->h_source[5];
	proto = eth->h_proto;
	data = eth + 1;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		struct vlan_hdr *vlan = data;
		if ((void *)(vlan + 1) > end)
			return 1;
		parsed.vlan_tci = bpf_ntohs(vlan->h_vlan_TCI);
		parsed.vlan_proto = bpf_ntohs(vlan->h_vlan_encapsulated_proto);
		proto = vlan->h_vlan_encapsulated_proto;
		data = vlan + 1;
	}
	parsed.eth_proto = bpf_ntohs(proto);
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data;
		if ((void *)(ip + 1) > end)
			return 1;
		parsed.ip_ihl = ip->ihl;
		parsed.ip_version = ip->version;
		parsed.ip_tos = ip->tos;
		parsed.ip_tot_len = bpf_ntohs(ip->tot_len);
		parsed.ip_id = bpf_ntohs(ip->id);
		parsed.ip_frag_off = bpf_ntohs(ip->frag_off);
		parsed.ip_ttl = ip->ttl;
		parsed.ip_protocol = ip->protocol;
		parsed.ip_check = ip->check;
		parsed.ip_saddr = bpf_ntohl(ip->saddr);
		parsed.ip_daddr = bpf_ntohl(ip->daddr);
		if (bpf_core_field_exists(((struct iphdr___addrs *)ip)->addrs))
			parsed.ip_addrs_daddr = bpf_ntohl(((struct iphdr___addrs *)ip)->addrs.daddr);
		/* the header's sum: 0xffff when its checksum is right */
		parsed.ip_csum = bpf_csum_diff(0, 0, (__be32 *)ip, sizeof(*ip), 0);
		return parse_l4(ip + 1, end, ip->protocol);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data;
		if ((void *)(ip6 + 1) > end)
			return 1;
		parsed.ip6_priority = ip6->priority;
		parsed.ip6_version = ip6->version;
		parsed.ip6_flow_lbl0 = ip6->flow_lbl[0];
		parsed.ip6_flow_lbl2 = ip6->flow_lbl[2];
		parsed.ip6_payload_len = bpf_ntohs(ip6->payload_len);
		parsed.ip6_nexthdr = ip6->nexthdr;
		parsed.ip6_hop_limit = ip6->hop_limit;
		parsed.ip6_saddr32_0 = bpf_ntohl(ip6->saddr.in6_u.u6_addr32[0]);
		parsed.ip6_daddr8_15 = ip6->daddr.in6_u.u6_addr8[15];
		if (bpf_core_field_exists(((struct ipv6hdr___addrs *)ip6)->addrs))
			parsed.ip6_addrs_daddr16_7 = bpf_ntohs(
				((struct ipv6hdr___addrs *)ip6)->addrs.daddr.in6_u.u6_addr16[7]);
		return parse_l4(ip6 + 1, end, ip6->nexthdr);
	}
	if (proto == bpf_htons(ETH_P_ARP)) {
		struct arphdr *arp = data;
		if ((void *)(arp + 1) > end)
			return 1;
		parsed.arp_hrd = bpf_ntohs(arp->ar_hrd);
		parsed.arp_pro = bpf_ntohs(arp->ar_pro);
		parsed.arp_hln = arp->ar_hln;
		parsed.arp_pln = arp->ar_pln;
		parsed.arp_op = bpf_ntohs(arp->ar_op);
	}
	return 0;
}

SEC("xdp")
int parse_xdp(struct xdp_md *ctx)
{
	return parse((void *)(long)ctx->data, (void *)(long)ctx->data_end) ? XDP_ABORTED
									 : XDP_PASS;
}

SEC("tc")
int parse_tc(struct __sk_buff *skb)
{
	return parse((void *)(long)skb->data, (void *)(long)skb->data_end);
}

char LICENSE[] SEC("license") = "GPL";
