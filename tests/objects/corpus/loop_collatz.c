// SPDX-License-Identifier: GPL-2.0
/* A loop with a data-dependent exit and an iteration cap: Collatz steps of a number set
 * in .rodata before load; the peak goes to .bss. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

const volatile __u64 start = 27;
__u64 peak;
__u32 steps;

SEC("syscall")
int collatz(void *ctx)
{
	__u64 n = start;
	__u32 i;

	peak = n;
	for (i = 0; i < 200 && n != 1; i++) {
		n = n & 1 ? 3 * n + 1 : n / 2;
		if (n > peak)
			peak = n;
	}
	steps = i;
	return n == 1;
}

char LICENSE[] SEC("license") = "GPL";
