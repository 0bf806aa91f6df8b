// SPDX-License-Identifier: GPL-2.0
/* Maps in a legacy "maps" section (struct bpf_map_def, as samples/bpf declared them before
 * BTF-defined maps), used by a socket filter. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct bpf_map_def {
	unsigned int type;
	unsigned int key_size;
	unsigned int value_size;
	unsigned int max_entries;
	unsigned int map_flags;
};

struct bpf_map_def SEC("maps") packet_sizes = {
	.type = BPF_MAP_TYPE_ARRAY,
	.key_size = sizeof(__u32),
	.value_size = sizeof(__u64),
	.max_entries = 4,
};

struct bpf_map_def SEC("maps") seen = {
	.type = BPF_MAP_TYPE_HASH,
	.key_size = sizeof(__u32),
	.value_size = sizeof(__u32),
	.max_entries = 32,
	.map_flags = BPF_F_NO_PREALLOC,
};

SEC("socket")
int count_sizes(struct __sk_buff *skb)
{
	__u32 slot = skb->len > 100 ? 1 : 0, len = skb->len;
	__u64 *total = bpf_map_lookup_elem(&packet_sizes, &slot);

	if (total)
		__sync_fetch_and_add(total, skb->len);
	bpf_map_update_elem(&seen, &len, &slot, BPF_ANY);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
