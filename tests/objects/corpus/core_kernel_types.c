// SPDX-License-Identifier: GPL-2.0
/* CO-RE existence checks against the kernel's own types: struct bpf_map and its fields,
 * a type no kernel has, an enum value, a field offset and size; resolved at load. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

struct bpf_map___core {
	__u32 max_entries;
	__u32 key_size;
	long field_from_the_future;
} __attribute__((preserve_access_index));

struct pybpf_corpus_no_such_type {
	int x;
} __attribute__((preserve_access_index));

enum bpf_map_type___core {
	BPF_MAP_TYPE_RINGBUF___core = 27,
	BPF_MAP_TYPE_PYBPF_NEVER___core = 1000,
};

__u64 facts[7];

SEC("raw_tp/sys_enter")
int kernel_facts(void *ctx)
{
	facts[0] = bpf_core_type_exists(struct bpf_map___core);
	facts[1] = bpf_core_type_exists(struct pybpf_corpus_no_such_type);
	facts[2] = bpf_core_field_exists(struct bpf_map___core, max_entries);
	facts[3] = bpf_core_field_exists(struct bpf_map___core, field_from_the_future);
	facts[4] = bpf_core_field_size(struct bpf_map___core, key_size);
	facts[5] = bpf_core_enum_value_exists(enum bpf_map_type___core,
					      BPF_MAP_TYPE_PYBPF_NEVER___core);
	facts[6] = bpf_core_enum_value(enum bpf_map_type___core, BPF_MAP_TYPE_RINGBUF___core);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
