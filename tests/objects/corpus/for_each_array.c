// SPDX-License-Identifier: GPL-2.0
/* bpf_for_each_map_elem over an array: the callback sums values into the context and
 * stops at the first zero value; the helper returns how many elements it visited. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct bpf_map;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} values SEC(".maps");

struct walk {
	__u64 sum;
	__u32 last_key;
};

long visited;
__u64 sum;
__u32 last_key;

static long add_until_zero(struct bpf_map *map, __u32 *key, __u64 *value, struct walk *w)
{
	if (!*value)
		return 1;
	w->sum += *value;
	w->last_key = *key;
	return 0;
}

SEC("syscall")
int walk_array(void *ctx)
{
	struct walk w = {};

	visited = bpf_for_each_map_elem(&values, add_until_zero, &w, 0);
	sum = w.sum;
	last_key = w.last_key;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
