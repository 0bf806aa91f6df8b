/* SPDX-License-Identifier: GPL-2.0 */
/* The few packet headers the corpus parses, declared here so that the programs include only
 * <linux/bpf.h> and libbpf's headers. Multi-byte fields are in network byte order. */
#ifndef CORPUS_PACKET_H
#define CORPUS_PACKET_H

#define ETH_P_IP	0x0800
#define ETH_P_IPV6	0x86DD
#define ETH_P_8021Q	0x8100
#define IPPROTO_TCP	6
#define IPPROTO_UDP	17

#define be16(x) __builtin_bswap16(x)

struct eth_hdr {
	__u8 dst[6];
	__u8 src[6];
	__u16 proto;
};

struct vlan_hdr {
	__u16 tci;
	__u16 proto;
};

struct ipv4_hdr {
	__u8 ver_ihl;	/* version in the high nibble, header length in 32-bit words low */
	__u8 tos;
	__u16 tot_len;
	__u16 id;
	__u16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__u32 saddr;
	__u32 daddr;
};

struct ipv6_hdr {
	__u32 ver_tc_flow;
	__u16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

struct udp_hdr {
	__u16 source;
	__u16 dest;
	__u16 len;
	__u16 check;
};

struct tcp_hdr {
	__u16 source;
	__u16 dest;
	__u32 seq;
	__u32 ack_seq;
	__u8 doff;	/* data offset in the high nibble */
	__u8 flags;	/* FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10 */
	__u16 window;
	__u16 check;
	__u16 urg_ptr;
};

#endif
