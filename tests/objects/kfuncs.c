// SPDX-License-Identifier: GPL-2.0
/* Kfunc calls as libbpf resolves them, for the kernel backend: kfuncs 6.18 offers every
 * program type (bpf_rcu_read_lock/unlock, in the common kfunc set), called directly or,
 * weak (a ___flavor), behind bpf_ksym_exists(), and a weak kfunc no kernel has, whose call
 * bpf_ksym_exists() guards. The emulated kernel lacks the rcu kfuncs: there the load fails
 * naming the first. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#ifndef bpf_ksym_exists /* libbpf >= 1.2 has it in bpf_helpers.h */
#define bpf_ksym_exists(sym) (!!(sym))
#endif

extern void bpf_rcu_read_lock(void) __ksym;
extern void bpf_rcu_read_unlock(void) __ksym;
extern int bpf_pybpf_no_such_kfunc(int x) __ksym __weak;
extern void bpf_rcu_read_lock___maybe(void) __ksym __weak;

SEC("tc")
int rcu_section(struct __sk_buff *skb)
{
	int len;

	bpf_rcu_read_lock();
	len = skb->len;
	bpf_rcu_read_unlock();
	if (bpf_ksym_exists(bpf_pybpf_no_such_kfunc))
		return bpf_pybpf_no_such_kfunc(len);
	return len + 1;
}

SEC("tc")
int rcu_if_there(struct __sk_buff *skb)
{
	if (!bpf_ksym_exists(bpf_rcu_read_lock___maybe))
		return 1;
	bpf_rcu_read_lock___maybe();
	bpf_rcu_read_unlock();
	return 2;
}

char LICENSE[] SEC("license") = "GPL";
