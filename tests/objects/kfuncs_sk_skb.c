// SPDX-License-Identifier: GPL-2.0
/* The sockmap CPU-affinity kfunc of the 2025 series, which the emulated kernel offers and
 * Linux never merged: strong, it loads on the emulated backend and the kernel backend
 * refuses it, saying why; weak (a ___flavor of it) behind bpf_ksym_exists(), it loads on
 * both, with the call where the kernel has it and without it where not. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#ifndef bpf_ksym_exists /* libbpf >= 1.2 has it in bpf_helpers.h */
#define bpf_ksym_exists(sym) (!!(sym))
#endif

extern int bpf_sk_skb_set_redirect_cpu___maybe(struct __sk_buff *s, int redir_cpu) __ksym __weak;
extern int bpf_pybpf_no_such_kfunc(int x) __ksym __weak;

SEC("sk_skb/stream_verdict")
int maybe_redirect_cpu(struct __sk_buff *skb)
{
	if (bpf_ksym_exists(bpf_sk_skb_set_redirect_cpu___maybe) &&
	    bpf_sk_skb_set_redirect_cpu___maybe(skb, 0))
		return SK_DROP;
	return SK_PASS;
}

SEC("tc")
int fallback(struct __sk_buff *skb)
{
	if (bpf_ksym_exists(bpf_pybpf_no_such_kfunc))
		return bpf_pybpf_no_such_kfunc(1);
	return 7;
}

char LICENSE[] SEC("license") = "GPL";
