// SPDX-License-Identifier: GPL-2.0
/* bpf-to-bpf calls: static and global subprograms in .text, nested calls, shared by two
 * programs that reach them in a different order (each gets its own copy, appended in
 * first-call order). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} totals SEC(".maps");

static __noinline __u64 square(__u64 x)
{
	return x * x;
}

static __noinline __u64 add_to(__u32 slot, __u64 amount)
{
	__u64 *total = bpf_map_lookup_elem(&totals, &slot);

	if (!total)
		return 0;
	*total += amount;
	return *total;
}

__noinline __u64 sum_of_squares(__u64 a, __u64 b)
{
	return square(a) + square(b);
}

SEC("xdp")
int squares_first(struct xdp_md *ctx)
{
	__u64 len = ctx->data_end - ctx->data;

	add_to(0, sum_of_squares(len, 2));
	return XDP_PASS;
}

SEC("xdp")
int totals_first(struct xdp_md *ctx)
{
	__u64 len = ctx->data_end - ctx->data;

	add_to(1, len);
	return square(3) == 9 ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
