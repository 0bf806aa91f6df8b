// SPDX-License-Identifier: GPL-2.0
/* A bpf_spin_lock in an array value guarding a two-field update (a counter and a running
 * sum of the packet lengths): runs from several CPUs at once lose no increment. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct guarded {
	struct bpf_spin_lock lock;
	__u64 count;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct guarded);
} totals SEC(".maps");

SEC("tc")
int count_locked(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct guarded *g = bpf_map_lookup_elem(&totals, &zero);

	if (!g)
		return 2;
	bpf_spin_lock(&g->lock);
	g->count++;
	g->bytes += skb->len;
	bpf_spin_unlock(&g->lock);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
