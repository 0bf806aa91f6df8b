// SPDX-License-Identifier: GPL-2.0
/* Errors a program sees from hash map helpers: a full map (-E2BIG), BPF_NOEXIST on an
 * existing key (-EEXIST), BPF_EXIST on a missing one and deleting a missing key
 * (-ENOENT); each return value goes to .bss. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} small SEC(".maps");

long codes[10];

SEC("syscall")
int fill_up(void *ctx)
{
	__u32 key, value = 7;
	int i;

	for (i = 0; i < 6; i++) {
		key = i;
		codes[i] = bpf_map_update_elem(&small, &key, &value, BPF_ANY);
	}
	key = 1;
	codes[6] = bpf_map_update_elem(&small, &key, &value, BPF_NOEXIST);
	key = 9;
	codes[7] = bpf_map_update_elem(&small, &key, &value, BPF_EXIST);
	codes[8] = bpf_map_delete_elem(&small, &key);
	key = 2;
	codes[9] = bpf_map_delete_elem(&small, &key);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
