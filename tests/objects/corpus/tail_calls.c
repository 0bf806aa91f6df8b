// SPDX-License-Identifier: GPL-2.0
/* Tail calls through a program array with initial contents: the entry program jumps to
 * the stage the packet's first byte names; stage 1 jumps on to stage 2; slot 3 is empty,
 * so that tail call falls through. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u32 visits[4];

int stage_one(struct xdp_md *ctx);
int stage_two(struct xdp_md *ctx);

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 4);
	__uint(key_size, sizeof(__u32));
	__array(values, int (void *));
} stages SEC(".maps") = {
	.values = { [1] = (void *)&stage_one, [2] = (void *)&stage_two },
};

SEC("xdp")
int stage_two(struct xdp_md *ctx)
{
	visits[2]++;
	return XDP_TX;
}

SEC("xdp")
int stage_one(struct xdp_md *ctx)
{
	visits[1]++;
	bpf_tail_call(ctx, &stages, 2);
	return XDP_ABORTED;
}

SEC("xdp")
int entry(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	visits[0]++;
	if ((void *)(data + 1) > data_end)
		return XDP_DROP;
	bpf_tail_call(ctx, &stages, data[0]);
	visits[3]++;	/* reached only when the slot is empty or out of range */
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
