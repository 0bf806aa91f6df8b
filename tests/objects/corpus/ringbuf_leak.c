// SPDX-License-Identifier: GPL-2.0
/* A ring buffer reservation that one path neither submits nor discards: the verifier's
 * reference tracking refuses the load (EINVAL, "Unreleased reference"). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} leaky SEC(".maps");

SEC("xdp")
int leak(struct xdp_md *ctx)
{
	__u64 *slot = bpf_ringbuf_reserve(&leaky, sizeof(*slot), 0);

	if (!slot)
		return XDP_PASS;
	*slot = ctx->data_end - ctx->data;
	if (*slot > 100)
		return XDP_DROP;	/* leaks the reservation */
	bpf_ringbuf_submit(slot, 0);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
