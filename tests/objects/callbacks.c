// SPDX-License-Identifier: GPL-2.0
/* Callbacks: helpers that take a function (bpf_loop, bpf_for_each_map_elem,
 * bpf_timer_set_callback). A callback is a static function of .text whose address an ld_imm64
 * loads (relocated against the .text section symbol, the offset in the imm), which the loader
 * turns into BPF_PSEUDO_FUNC. Callbacks are referenced from the programs' own sections and
 * from a .text subprogram; add_index is reached from two places of one program and from two
 * programs (linked once into each). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define CLOCK_MONOTONIC 1

struct loop_ctx {
	__u64 sum;
	__u32 limit;
};

struct walk_ctx {
	__u64 keys;
	__u64 values;
	__u32 seen;
};

struct timer_elem {
	struct bpf_timer timer;
	__u64 fired;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} weights SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, int);
	__type(value, struct timer_elem);
} timers SEC(".maps");

/* What the programs saw, read by the tests. */
__u64 loop_sum, loop_count, nested_sum;
__u64 hash_keys, hash_values, hash_seen, hash_walked;
__u64 array_seen, array_walked, doubled_seen, doubled_walked;
long timer_init_ret, timer_callback_ret, timer_start_ret;
__u64 timer_runs;

/* bpf_loop: 0 goes on, 1 stops the loop. */
static int add_index(__u32 index, struct loop_ctx *ctx)
{
	if (index >= ctx->limit)
		return 1;
	ctx->sum += index;
	return 0;
}

static __noinline __u64 sum_below(__u32 limit)
{
	struct loop_ctx ctx = { .limit = limit };

	bpf_loop(1000, add_index, &ctx, 0);
	return ctx.sum;
}

SEC("xdp")
int sum_indices(struct xdp_md *xdp)
{
	struct loop_ctx ctx = { .limit = xdp->data_end - xdp->data };

	loop_count = bpf_loop(100, add_index, &ctx, 0);
	loop_sum = ctx.sum;
	return XDP_PASS;
}

SEC("xdp")
int sum_twice(struct xdp_md *xdp)
{
	struct loop_ctx ctx = { .limit = 10 };

	bpf_loop(20, add_index, &ctx, 0);
	nested_sum = ctx.sum + sum_below(xdp->data_end - xdp->data);
	return XDP_PASS;
}

/* bpf_for_each_map_elem: 0 goes on, 1 stops the walk. */
static __u64 add_elem(void *map, __u32 *key, __u64 *value, struct walk_ctx *ctx)
{
	ctx->keys += *key;
	ctx->values += *value;
	ctx->seen++;
	return 0;
}

static __u64 double_until_3(void *map, __u32 *key, __u64 *value, struct walk_ctx *ctx)
{
	*value *= 2;
	ctx->seen++;
	return *key >= 3;
}

SEC("xdp")
int walk_maps(struct xdp_md *xdp)
{
	struct walk_ctx hash = {}, array = {}, doubled = {};

	hash_walked = bpf_for_each_map_elem(&weights, add_elem, &hash, 0);
	hash_keys = hash.keys;
	hash_values = hash.values;
	hash_seen = hash.seen;
	array_walked = bpf_for_each_map_elem(&slots, add_elem, &array, 0);
	array_seen = array.seen;
	doubled_walked = bpf_for_each_map_elem(&slots, double_until_3, &doubled, 0);
	doubled_seen = doubled.seen;
	return XDP_PASS;
}

/* bpf_timer: the callback runs in softirq context once the timer expires. */
static int on_timer(void *map, int *key, struct timer_elem *elem)
{
	elem->fired++;
	__sync_fetch_and_add(&timer_runs, 1);
	return 0;
}

SEC("xdp")
int arm_timer(struct xdp_md *xdp)
{
	int key = 0;
	struct timer_elem *elem = bpf_map_lookup_elem(&timers, &key);

	if (!elem)
		return XDP_ABORTED;
	timer_init_ret = bpf_timer_init(&elem->timer, &timers, CLOCK_MONOTONIC);
	timer_callback_ret = bpf_timer_set_callback(&elem->timer, on_timer);
	timer_start_ret = bpf_timer_start(&elem->timer, 1000, 0);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
