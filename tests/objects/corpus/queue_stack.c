// SPDX-License-Identifier: GPL-2.0
/* A queue and a stack filled and drained by a program: push until full (-E2BIG), peek,
 * pop in FIFO and LIFO order, pop from empty (-ENOENT), and BPF_EXIST on a full queue
 * (the oldest element pushed out). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 3);
	__type(value, __u32);
} fifo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK);
	__uint(max_entries, 3);
	__type(value, __u32);
} lifo SEC(".maps");

long push_codes[4];
__u32 popped_fifo[3], popped_lifo[3];
long empty_pop, peeked, overwrite;

SEC("syscall")
int shuffle(void *ctx)
{
	__u32 v;
	int i;

	for (i = 0; i < 4; i++) {
		v = 10 + i;
		push_codes[i] = bpf_map_push_elem(&fifo, &v, 0);
		bpf_map_push_elem(&lifo, &v, 0);
	}
	bpf_map_peek_elem(&fifo, &v);
	peeked = v;
	v = 99;
	overwrite = bpf_map_push_elem(&fifo, &v, BPF_EXIST);
	for (i = 0; i < 3; i++) {
		bpf_map_pop_elem(&fifo, &popped_fifo[i]);
		bpf_map_pop_elem(&lifo, &popped_lifo[i]);
	}
	empty_pop = bpf_map_pop_elem(&fifo, &v);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
