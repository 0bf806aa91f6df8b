// SPDX-License-Identifier: GPL-2.0
/* An open-coded numeric iterator (bpf_iter_num_new/next/destroy, what bpf_for expands to):
 * the sum of squares of [first, last) with the bounds in .rodata. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "iter_num.h"

const volatile int first = 3;
const volatile int last = 13;
__u64 sum_of_squares;
__u32 visited;

SEC("syscall")
int iterate_squares(void *ctx)
{
	struct bpf_iter_num it;
	int *v;

	sum_of_squares = 0;
	visited = 0;
	bpf_iter_num_new(&it, first, last);
	while ((v = bpf_iter_num_next(&it))) {
		sum_of_squares += (__u64)*v * *v;
		visited++;
	}
	bpf_iter_num_destroy(&it);
	return visited;
}

char LICENSE[] SEC("license") = "GPL";
