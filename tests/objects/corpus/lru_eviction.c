// SPDX-License-Identifier: GPL-2.0
/* An LRU hash smaller than the keys inserted into it, from one CPU: which keys survive
 * depends on the LRU lists' rotation (recently looked-up keys are kept). The raw
 * tracepoint's arguments are (first key, count, key to touch between inserts). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} recent SEC(".maps");

__u32 inserted, failed;

SEC("raw_tp/sys_enter")
int insert_keys(__u64 *args)
{
	__u32 first = args[0], count = args[1], hot = args[2];
	__u32 i;

	for (i = 0; i < count && i < 64; i++) {
		__u32 key = first + i;
		__u64 value = key * 10;

		if (bpf_map_update_elem(&recent, &key, &value, BPF_ANY))
			failed++;
		else
			inserted++;
		bpf_map_lookup_elem(&recent, &hot);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
