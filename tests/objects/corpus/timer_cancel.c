// SPDX-License-Identifier: GPL-2.0
/* A bpf_timer armed far in the future and cancelled before it fires: cancel reports an
 * active timer (1), a second cancel an inactive one (0); starting an uninitialised timer
 * is -EINVAL. The callback never runs. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define CLOCK_MONOTONIC 1

struct timed {
	struct bpf_timer timer;
	__u64 fired;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct timed);
} slots SEC(".maps");

long codes[5];

static int never(void *map, __u32 *key, struct timed *value)
{
	value->fired++;
	return 0;
}

SEC("tc")
int arm_and_cancel(struct __sk_buff *skb)
{
	__u32 armed = 0, untouched = 1;
	struct timed *t = bpf_map_lookup_elem(&slots, &armed);
	struct timed *u = bpf_map_lookup_elem(&slots, &untouched);

	if (!t || !u)
		return 2;
	codes[0] = bpf_timer_start(&u->timer, 1000, 0);
	codes[1] = bpf_timer_init(&t->timer, &slots, CLOCK_MONOTONIC);
	codes[2] = bpf_timer_set_callback(&t->timer, never);
	codes[3] = bpf_timer_start(&t->timer, 60ULL * 1000000000, 0);
	codes[4] = bpf_timer_cancel(&t->timer) * 10 + bpf_timer_cancel(&t->timer);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
