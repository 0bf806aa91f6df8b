// SPDX-License-Identifier: GPL-2.0
/* bpf_loop with a callback and a context struct: a sum over all iterations, a search that
 * stops early (the callback returns 1), and the errors: flags other than 0 (-EINVAL) and
 * more than 1 << 23 loops (-E2BIG). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct loop_ctx {
	__u64 sum;
	__u32 stop_at;
	__u32 calls;
};

long results[6];

static int add_index(__u32 index, struct loop_ctx *lc)
{
	lc->sum += index;
	lc->calls++;
	return 0;
}

static int stop_at(__u32 index, struct loop_ctx *lc)
{
	lc->calls++;
	return index == lc->stop_at;
}

SEC("syscall")
int loops(void *ctx)
{
	struct loop_ctx lc = {};

	results[0] = bpf_loop(100, add_index, &lc, 0);
	results[1] = lc.sum;
	lc.calls = 0;
	lc.stop_at = 7;
	results[2] = bpf_loop(50, stop_at, &lc, 0);
	results[3] = lc.calls;
	results[4] = bpf_loop(10, add_index, &lc, 1);
	results[5] = bpf_loop((1 << 23) + 1, add_index, &lc, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
