// SPDX-License-Identifier: GPL-2.0
/* Nested open-coded iterators filling an array map: cell [i] holds the sum over j < i of
 * i * j; an empty range (new with start > end fails, -EINVAL) yields nothing. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "iter_num.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} cells SEC(".maps");

int bad_range_err;
__u32 bad_range_items;

SEC("syscall")
int fill_cells(void *ctx)
{
	struct bpf_iter_num outer, inner, bad;
	int *i, *j;

	bpf_iter_num_new(&outer, 0, 8);
	while ((i = bpf_iter_num_next(&outer))) {
		__u32 key = *i;
		__u64 *cell = bpf_map_lookup_elem(&cells, &key);

		if (!cell)
			continue;
		bpf_iter_num_new(&inner, 0, *i);
		while ((j = bpf_iter_num_next(&inner)))
			*cell += (__u64)*i * *j;
		bpf_iter_num_destroy(&inner);
	}
	bpf_iter_num_destroy(&outer);

	bad_range_err = bpf_iter_num_new(&bad, 5, 2);
	while (bpf_iter_num_next(&bad))
		bad_range_items++;
	bpf_iter_num_destroy(&bad);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
