// SPDX-License-Identifier: GPL-2.0
/* An array of maps with initial contents: the syscall program's context picks the inner
 * map and the slot to bump; an empty outer slot gives NULL, counted as a miss. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct pick {
	__u32 outer;
	__u32 inner;
};

struct counters {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} tenant_a SEC(".maps"), tenant_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 3);
	__type(key, __u32);
	__array(values, struct counters);
} tenants SEC(".maps") = {
	.values = { [0] = &tenant_a, [2] = &tenant_b },
};

__u32 misses;

SEC("syscall")
int bump(struct pick *pick)
{
	__u32 outer = pick->outer, inner = pick->inner;
	void *map = bpf_map_lookup_elem(&tenants, &outer);
	__u64 *slot;

	if (!map) {
		misses++;
		return -1;
	}
	slot = bpf_map_lookup_elem(map, &inner);
	if (!slot)
		return -2;
	*slot += 1;
	return *slot;
}

char LICENSE[] SEC("license") = "GPL";
