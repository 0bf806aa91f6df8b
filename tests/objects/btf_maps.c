// SPDX-License-Identifier: GPL-2.0
/* BTF-defined maps of several types, with typed and sized keys and values, and one XDP
 * program that uses them all (run it with a packet: it records the packet's length). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct point {
	__u32 x;
	__s32 y;
	__u64 weight;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct point);
} points SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u64));
} sized SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} percpu_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 128);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__type(key, __u64);
	__type(value, __u32);
} lru SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 16);
	__type(value, __u32);
} queue SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_BLOOM_FILTER);
	__uint(max_entries, 100);
	__uint(map_extra, 3);
	__type(value, __u32);
} bloom SEC(".maps");

struct lpm_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, __u32);
} routes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__uint(map_flags, BPF_F_NUMA_NODE);
	__uint(numa_node, 0);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__type(key, __u32);
	__type(value, __u64);
} pinned_counts SEC(".maps");

SEC("xdp")
int record_packet(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	__u32 zero = 0, one = 1;
	struct point p = { .x = len, .y = -(int)len, .weight = 7 };
	struct lpm_key key = { .prefixlen = 32, .addr = { 10, 0, 0, 1 } };
	__u64 wide = len, *counter;
	__u32 *route;

	bpf_map_update_elem(&points, &zero, &p, BPF_ANY);
	counter = bpf_map_lookup_elem(&percpu_counts, &zero);
	if (counter)
		*counter += 1;
	counter = bpf_map_lookup_elem(&sized, &one);
	if (counter)
		*counter += len;
	bpf_map_update_elem(&lru, &wide, &one, BPF_ANY);
	bpf_map_update_elem(&pinned_counts, &one, &wide, BPF_ANY);
	bpf_map_push_elem(&queue, &len, BPF_ANY);
	bpf_map_push_elem(&bloom, &len, 0);
	route = bpf_map_lookup_elem(&routes, &key);
	return route ? *route : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
