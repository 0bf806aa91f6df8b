// SPDX-License-Identifier: GPL-2.0
/* bpf_ringbuf_reserve with submit or discard (a discarded record still takes its space
 * until consumed), and a reservation larger than the ring (NULL). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct sample {
	__u64 value;
	__u32 kept;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} samples SEC(".maps");

__u32 submitted, discarded, too_big;
__u64 avail_after;

SEC("syscall")
int produce(__u64 *value)
{
	struct sample *s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	void *huge = bpf_ringbuf_reserve(&samples, 8192, 0);

	if (huge) {
		bpf_ringbuf_discard(huge, 0);
	} else {
		too_big++;
	}
	if (!s)
		return -1;
	s->value = *value;
	s->kept = !(*value & 1);
	if (s->kept) {
		bpf_ringbuf_submit(s, 0);
		submitted++;
	} else {
		bpf_ringbuf_discard(s, 0);
		discarded++;
	}
	avail_after = bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
