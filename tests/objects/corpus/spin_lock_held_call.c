// SPDX-License-Identifier: GPL-2.0
/* A helper call while a bpf_spin_lock is held: the verifier refuses the load (EINVAL,
 * "function calls are not allowed while holding a lock"). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct guarded {
	struct bpf_spin_lock lock;
	__u64 stamp;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct guarded);
} stamps SEC(".maps");

SEC("tc")
int stamp_locked(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct guarded *g = bpf_map_lookup_elem(&stamps, &zero);

	if (!g)
		return 2;
	bpf_spin_lock(&g->lock);
	g->stamp = bpf_ktime_get_ns();
	bpf_spin_unlock(&g->lock);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
