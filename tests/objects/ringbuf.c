// SPDX-License-Identifier: GPL-2.0
/* A ring buffer producer: each run writes a record with bpf_ringbuf_output, one through
 * bpf_ringbuf_reserve + submit, reserves one and discards it, and outputs a 5-byte record
 * (padded to 8 in the ring). Records carry a sequence number; what could not be written
 * (ring full) is counted in `dropped`. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

struct event {
	__u32 seq;
	__u32 kind;	/* 1: output, 2: reserve + submit, 3: reserve + discard */
	__u64 len;
};

__u32 seq;
__u64 dropped;

SEC("xdp")
int produce(struct xdp_md *ctx)
{
	__u64 len = ctx->data_end - ctx->data;
	struct event out = { .seq = seq++, .kind = 1, .len = len };
	struct event *rec;
	char tail[5] = { 't', 'a', 'i', 'l', (char)len };

	if (bpf_ringbuf_output(&events, &out, sizeof(out), 0))
		dropped++;
	rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	if (rec) {
		rec->seq = seq++;
		rec->kind = 2;
		rec->len = len;
		bpf_ringbuf_submit(rec, 0);
	} else {
		dropped++;
	}
	rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	if (rec) {
		rec->seq = seq++;
		rec->kind = 3;
		rec->len = len;
		bpf_ringbuf_discard(rec, 0);
	}
	if (bpf_ringbuf_output(&events, tail, sizeof(tail), 0))
		dropped++;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
