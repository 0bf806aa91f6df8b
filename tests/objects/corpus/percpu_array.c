// SPDX-License-Identifier: GPL-2.0
/* A per-CPU array: each run counts on the CPU it runs on and records that CPU's number,
 * run with BPF_F_TEST_RUN_ON_CPU on each CPU in turn. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} per_cpu SEC(".maps");

SEC("raw_tp/sys_enter")
int count_on_cpu(void *ctx)
{
	__u32 runs = 0, cpu_slot = 1;
	__u64 *count = bpf_map_lookup_elem(&per_cpu, &runs);
	__u64 *cpu = bpf_map_lookup_elem(&per_cpu, &cpu_slot);

	if (!count || !cpu)
		return 0;
	*count += 1;
	*cpu = bpf_get_smp_processor_id() + 100;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
