// SPDX-License-Identifier: GPL-2.0
/* bpf_user_ringbuf_drain: requests user space submitted to a user ring buffer, each read in
 * the callback with bpf_dynptr_read and added to a hash map; a sample shorter than a request
 * fails the read (-E2BIG) and is counted; a STOP request ends the drain (the callback returns
 * 1); a discarded sample is skipped; bad flags are -EINVAL. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

enum { OP_ADD = 1, OP_STOP = 2 };

struct request {
	__u32 op;
	__u32 key;
	__u64 value;
};

struct {
	__uint(type, BPF_MAP_TYPE_USER_RINGBUF);
	__uint(max_entries, 4096);
} requests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} totals SEC(".maps");

__u64 drain_flags;
long last_ret;
__u32 short_samples, stops, handled;

static long handle_request(struct bpf_dynptr *dynptr, void *ctx)
{
	__u32 *seen = ctx;
	struct request req;
	__u64 *total;

	if (bpf_dynptr_read(&req, sizeof(req), dynptr, 0, 0)) {
		short_samples++;
		return 0;
	}
	(*seen)++;
	if (req.op == OP_STOP) {
		stops++;
		return 1;
	}
	total = bpf_map_lookup_elem(&totals, &req.key);
	if (total)
		__sync_fetch_and_add(total, req.value);
	else
		bpf_map_update_elem(&totals, &req.key, &req.value, BPF_NOEXIST);
	return 0;
}

SEC("syscall")
int drain(void *ctx)
{
	__u32 seen = 0;

	last_ret = bpf_user_ringbuf_drain(&requests, handle_request, &seen, drain_flags);
	handled += seen;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
