// SPDX-License-Identifier: GPL-2.0
/* A feature pybpf parses but cannot load: arena global data (__arena, a variable of the
 * .addr_space.1 section; extern kernel variables and kfuncs are loaded: externs.c,
 * kfuncs.c). Parsing succeeds; loading must fail naming it. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

int __attribute__((address_space(1))) arena_counter SEC(".addr_space.1");

SEC("raw_tp/sys_enter")
int uses_arena(void *ctx)
{
	return arena_counter == 0;
}

SEC("socket")
int plain(struct __sk_buff *skb)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
