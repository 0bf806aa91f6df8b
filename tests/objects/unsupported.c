// SPDX-License-Identifier: GPL-2.0
/* Features pybpf parses but cannot load: a kfunc call and a typed extern kernel variable
 * (.ksyms). Parsing succeeds; loading must fail naming them. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

extern void bpf_rcu_read_lock(void) __ksym;
extern void bpf_rcu_read_unlock(void) __ksym;
extern const int bpf_prog_active __ksym;

SEC("tp_btf/sys_enter")
int uses_kfunc(void *ctx)
{
	bpf_rcu_read_lock();
	bpf_rcu_read_unlock();
	return 0;
}

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
