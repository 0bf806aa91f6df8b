// SPDX-License-Identifier: GPL-2.0
/* bpf_for_each_map_elem over a hash map, deleting the elements with odd values from the
 * callback (allowed for hash maps) and doubling the others in place. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct bpf_map;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} table SEC(".maps");

__u32 deleted, doubled;
long visited;

static long prune(struct bpf_map *map, __u32 *key, __u64 *value, void *unused)
{
	if (*value & 1) {
		bpf_map_delete_elem(map, key);
		deleted++;
	} else {
		*value *= 2;
		doubled++;
	}
	return 0;
}

SEC("syscall")
int prune_odd(void *ctx)
{
	visited = bpf_for_each_map_elem(&table, prune, 0, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
