// SPDX-License-Identifier: GPL-2.0
/* libbpf's extern variables: __kconfig ones (virtual LINUX_* and CONFIG_* of every kind
 * libbpf fills) read from the .kconfig map, and missing weak __ksym ones, typed and
 * typeless, that load 0. The program copies each value into .bss so a test can check
 * that every load reads its extern's slot. */
#include <linux/bpf.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>

struct task_struct;

extern int LINUX_KERNEL_VERSION __kconfig;
extern bool LINUX_HAS_BPF_COOKIE __kconfig;
extern bool LINUX_HAS_SYSCALL_WRAPPER __kconfig;
extern unsigned int CONFIG_HZ __kconfig;
extern bool CONFIG_BPF_SYSCALL __kconfig;
extern enum libbpf_tristate CONFIG_PYBPF_TRI __kconfig __weak;
extern char CONFIG_PYBPF_STR[8] __kconfig __weak;
extern char CONFIG_PYBPF_CHAR __kconfig __weak;
extern short CONFIG_PYBPF_NEG __kconfig __weak;
extern unsigned long long CONFIG_PYBPF_U64 __kconfig __weak;

extern const void pybpf_no_such_sym __ksym __weak;
extern const struct task_struct pybpf_no_such_task __ksym __weak;

struct kconfig_out {
	int version;
	bool cookie, wrapper;
	unsigned int hz;
	bool bpf_syscall;
	enum libbpf_tristate tri;
	char str[8];
	char chr;
	short neg;
	unsigned long long u64;
};

struct kconfig_out out;

SEC("xdp")
int kconfig_values(struct xdp_md *ctx)
{
	out.version = LINUX_KERNEL_VERSION;
	out.cookie = LINUX_HAS_BPF_COOKIE;
	out.wrapper = LINUX_HAS_SYSCALL_WRAPPER;
	out.hz = CONFIG_HZ;
	out.bpf_syscall = CONFIG_BPF_SYSCALL;
	out.tri = CONFIG_PYBPF_TRI;
	__builtin_memcpy(out.str, CONFIG_PYBPF_STR, sizeof(out.str));
	out.chr = CONFIG_PYBPF_CHAR;
	out.neg = CONFIG_PYBPF_NEG;
	out.u64 = CONFIG_PYBPF_U64;
	return XDP_PASS;
}

SEC("xdp")
int weak_ksyms(struct xdp_md *ctx)
{
	if (&pybpf_no_such_sym)
		return 1;
	if (&pybpf_no_such_task)
		return 2;
	return 7;
}

char LICENSE[] SEC("license") = "GPL";
