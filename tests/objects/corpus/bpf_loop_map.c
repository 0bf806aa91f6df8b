// SPDX-License-Identifier: GPL-2.0
/* A bpf_loop callback that calls map helpers: fills a hash map with squares for the
 * first n keys (n from the test run's context), then the program reads one back. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32);
	__type(key, __u32);
	__type(value, __u64);
} squares SEC(".maps");

static int put_square(__u32 index, void *unused)
{
	__u64 square = (__u64)index * index;

	bpf_map_update_elem(&squares, &index, &square, BPF_ANY);
	return 0;
}

SEC("syscall")
int fill_squares(__u32 *n)
{
	__u32 key = 5;
	__u64 *five;
	long done = bpf_loop(*n, put_square, 0, 0);

	five = bpf_map_lookup_elem(&squares, &key);
	return five ? done * 1000 + *five : done;
}

char LICENSE[] SEC("license") = "GPL";
