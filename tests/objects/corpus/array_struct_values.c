// SPDX-License-Identifier: GPL-2.0
/* Array values that are structs with a nested struct and an array member, updated from a
 * syscall program whose context (a struct of inputs) comes from the test run. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct sample_args {
	__u32 slot;
	__u32 value;
};

struct range {
	__u32 low;
	__u32 high;
};

struct histogram {
	struct range seen;
	__u16 buckets[4];
	__u64 total;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct histogram);
} histograms SEC(".maps");

SEC("syscall")
int record_sample(struct sample_args *args)
{
	__u32 slot = args->slot, value = args->value;
	struct histogram *h = bpf_map_lookup_elem(&histograms, &slot);

	if (!h)
		return -1;
	if (!h->total || value < h->seen.low)
		h->seen.low = value;
	if (value > h->seen.high)
		h->seen.high = value;
	h->buckets[value < 10 ? 0 : value < 100 ? 1 : value < 1000 ? 2 : 3]++;
	h->total += value;
	return h->buckets[3];
}

char LICENSE[] SEC("license") = "GPL";
