// SPDX-License-Identifier: GPL-2.0
/* Atomic operations on .bss and map values: add, fetch-and-add, or, and, xor, exchange and
 * compare-and-exchange, each result recorded. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u64 counter = 10;
__u64 bits = 0xf0;
__u64 old_values[5];

SEC("syscall")
int atomic_ops(void *ctx)
{
	__sync_fetch_and_add(&counter, 5);
	old_values[0] = __sync_fetch_and_add(&counter, 1);
	old_values[1] = __sync_fetch_and_or(&bits, 0x0f);
	__sync_fetch_and_and(&bits, 0x3c);
	__sync_fetch_and_xor(&bits, 0x01);
	old_values[2] = __sync_lock_test_and_set(&counter, 100);
	old_values[3] = __sync_val_compare_and_swap(&counter, 100, 200);
	old_values[4] = __sync_val_compare_and_swap(&counter, 100, 300);
	return counter;
}

char LICENSE[] SEC("license") = "GPL";
