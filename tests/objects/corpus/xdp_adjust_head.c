// SPDX-License-Identifier: GPL-2.0
/* Packet rewriting: strip an outer VLAN tag with bpf_xdp_adjust_head (the MAC addresses
 * moved forward first), or push a 4-byte tag onto untagged frames; the test compares the
 * frame the run hands back. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "packet.h"

SEC("xdp")
int toggle_vlan(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	struct vlan_hdr *vlan = (void *)(eth + 1);
	__u8 macs[12];
	int tagged;

	if ((void *)(vlan + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(macs, eth, sizeof(macs));
	tagged = eth->proto == be16(ETH_P_8021Q);
	/* Tagged: the frame starts 4 bytes later, where the inner type follows the MACs.
	 * Untagged: 4 bytes of headroom in front; the old type field becomes the tag's. */
	if (bpf_xdp_adjust_head(ctx, tagged ? (int)sizeof(*vlan) : -(int)sizeof(*vlan)))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	vlan = (void *)(eth + 1);
	if ((void *)(vlan + 1) > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(eth, macs, sizeof(macs));
	if (!tagged) {
		eth->proto = be16(ETH_P_8021Q);
		vlan->tci = be16(42);
	}
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
