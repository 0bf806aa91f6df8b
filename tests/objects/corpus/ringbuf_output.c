// SPDX-License-Identifier: GPL-2.0
/* bpf_ringbuf_output of fixed-size events, one per run, and the ring's state from
 * bpf_ringbuf_query after each: available data, producer and consumer positions (each
 * record takes an 8-byte header plus its size rounded up to 8). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct event {
	__u32 seq;
	__u32 len;
	__u8 head[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

__u32 seq;
long last_err;
__u64 avail, prod_pos, cons_pos, ring_size;

SEC("xdp")
int emit(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct event e = { .seq = ++seq, .len = data_end - (void *)data };

	if ((void *)(data + 4) <= data_end)
		__builtin_memcpy(e.head, data, 4);
	last_err = bpf_ringbuf_output(&events, &e, sizeof(e), 0);
	avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	prod_pos = bpf_ringbuf_query(&events, BPF_RB_PROD_POS);
	cons_pos = bpf_ringbuf_query(&events, BPF_RB_CONS_POS);
	ring_size = bpf_ringbuf_query(&events, BPF_RB_RING_SIZE);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
