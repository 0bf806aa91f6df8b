// SPDX-License-Identifier: GPL-2.0
/* A feature pybpf parses but cannot load: a typed extern kernel variable (.ksyms, a
 * BPF_PSEUDO_BTF_ID load; kfunc calls are loaded: kfuncs.c). Parsing succeeds; loading
 * must fail naming it. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

extern const int bpf_prog_active __ksym;

SEC("raw_tp/sys_enter")
int uses_ksym(void *ctx)
{
	return bpf_prog_active == 0;
}

SEC("socket")
int plain(struct __sk_buff *skb)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
