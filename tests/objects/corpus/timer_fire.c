// SPDX-License-Identifier: GPL-2.0
/* A bpf_timer in a hash value: initialised, given a callback and started with a 1 ms
 * timeout; the callback (in softirq context) counts and records its key. Initialising it
 * twice gives -EBUSY. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define CLOCK_MONOTONIC 1

struct timed {
	struct bpf_timer timer;
	__u64 fired;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct timed);
} timers SEC(".maps");

long codes[4];
__u32 fired_key;

static int on_fire(void *map, __u32 *key, struct timed *value)
{
	value->fired++;
	fired_key = *key;
	return 0;
}

SEC("tc")
int arm(struct __sk_buff *skb)
{
	__u32 key = 7;
	struct timed fresh = {}, *t;

	bpf_map_update_elem(&timers, &key, &fresh, BPF_ANY);
	t = bpf_map_lookup_elem(&timers, &key);
	if (!t)
		return 2;
	codes[0] = bpf_timer_init(&t->timer, &timers, CLOCK_MONOTONIC);
	codes[1] = bpf_timer_init(&t->timer, &timers, CLOCK_MONOTONIC);
	codes[2] = bpf_timer_set_callback(&t->timer, on_fire);
	codes[3] = bpf_timer_start(&t->timer, 1000000, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
