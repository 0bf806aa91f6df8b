// SPDX-License-Identifier: GPL-2.0
/* A per-CPU hash keyed by the raw tracepoint's first argument, adding its second: an
 * element created on one CPU is zero on the others. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} sums SEC(".maps");

SEC("raw_tp/sys_enter")
int add_on_cpu(__u64 *args)
{
	__u32 key = args[0];
	__u64 amount = args[1];
	__u64 *sum = bpf_map_lookup_elem(&sums, &key);

	if (sum) {
		*sum += amount;
		return 1;
	}
	bpf_map_update_elem(&sums, &key, &amount, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
