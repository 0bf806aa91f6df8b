// SPDX-License-Identifier: GPL-2.0
/* A program writing to a const volatile (.rodata) variable through a cast: .rodata is
 * mapped read-only for programs, so the load is refused (EACCES, "write into map
 * forbidden"). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

const volatile __u32 threshold = 10;

SEC("xdp")
int tamper(struct xdp_md *ctx)
{
	*(volatile __u32 *)&threshold = ctx->data_end - ctx->data;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
