// SPDX-License-Identifier: GPL-2.0
/* Static subprograms verified in their caller's state: gcd with a bounded loop, lcm on top,
 * five arguments (the most a BPF call passes), inputs in .data changed between runs. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u64 a = 12, b = 18;
__u64 gcd_out, lcm_out, mix_out;

static __noinline __u64 gcd(__u64 x, __u64 y)
{
	int i;

	for (i = 0; i < 64 && y; i++) {
		__u64 t = x % y;

		x = y;
		y = t;
	}
	return x;
}

static __noinline __u64 lcm(__u64 x, __u64 y)
{
	__u64 g = gcd(x, y);

	return g ? x / g * y : 0;
}

static __noinline __u64 mix(__u64 p, __u64 q, __u64 r, __u64 s, __u64 t)
{
	return p * 10000 + q * 1000 + r * 100 + s * 10 + t;
}

SEC("syscall")
int number_theory(void *ctx)
{
	gcd_out = gcd(a, b);
	lcm_out = lcm(a, b);
	mix_out = mix(1, 2, 3, 4, gcd_out % 10);
	return gcd_out;
}

char LICENSE[] SEC("license") = "GPL";
