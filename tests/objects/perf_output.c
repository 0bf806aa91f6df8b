// SPDX-License-Identifier: GPL-2.0
/* bpf_perf_event_output into a PERF_EVENT_ARRAY (max_entries left to the loader: a slot per
 * possible CPU, as libbpf does): each run sends a sample on the CPU it runs on, then a 5-byte
 * one; a send that fails (no event in the slot) is counted in `failed`. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(int));
	__uint(value_size, sizeof(int));
} samples SEC(".maps");

struct sample {
	__u32 seq;
	__u32 len;
};

__u32 seq;
__u64 failed;

SEC("xdp")
int send_samples(struct xdp_md *ctx)
{
	struct sample s = { .seq = seq++, .len = ctx->data_end - ctx->data };
	char odd[5] = { 'o', 'd', 'd', '!', (char)s.len };

	if (bpf_perf_event_output(ctx, &samples, BPF_F_CURRENT_CPU, &s, sizeof(s)))
		failed++;
	if (bpf_perf_event_output(ctx, &samples, BPF_F_CURRENT_CPU, odd, sizeof(odd)))
		failed++;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
