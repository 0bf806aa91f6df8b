// SPDX-License-Identifier: GPL-2.0
/* Map-in-map with initial contents (__array(values, ...)), and a program array whose
 * slots are filled with programs of this object, for tail calls. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct inner_array {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} inner_a SEC(".maps"), inner_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 4);
	__type(key, __u32);
	__array(values, struct inner_array);
} outer_array SEC(".maps") = {
	.values = { [0] = &inner_a, [3] = &inner_b },
};

struct inner_hash {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u32);
} inner_h SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 4);
	__type(key, __u32);
	__array(values, struct inner_hash);
} outer_hash SEC(".maps") = {
	.values = { [1] = &inner_h },
};

int tail_target(struct xdp_md *ctx);

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__uint(key_size, sizeof(__u32));
	__array(values, int (void *));
} jump_table SEC(".maps") = {
	.values = { [1] = (void *)&tail_target },
};

SEC("xdp")
int tail_target(struct xdp_md *ctx)
{
	return XDP_TX;
}

SEC("xdp")
int use_inner_maps(struct xdp_md *ctx)
{
	__u32 zero = 0, one = 1, three = 3;
	__u64 *slot;
	void *inner;

	inner = bpf_map_lookup_elem(&outer_array, &three);
	if (!inner)
		return XDP_ABORTED;
	slot = bpf_map_lookup_elem(inner, &one);
	if (slot)
		*slot += 1;
	inner = bpf_map_lookup_elem(&outer_hash, &one);
	if (!inner)
		return XDP_ABORTED;
	bpf_map_update_elem(inner, &three, &one, BPF_ANY);
	bpf_tail_call(ctx, &jump_table, one);
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
