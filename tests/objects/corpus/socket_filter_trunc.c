// SPDX-License-Identifier: GPL-2.0
/* A socket filter: the return value is how many bytes to keep. Keeps at most .rodata's
 * snap_len bytes of IPv4 packets (as the program sees them: after the Ethernet header)
 * and nothing of others; counts both in an array. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

const volatile __u32 snap_len = 20;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} kept SEC(".maps");

SEC("socket")
int snap(struct __sk_buff *skb)
{
	__u32 ipv4 = skb->protocol == __builtin_bswap16(0x0800);
	__u64 *count = bpf_map_lookup_elem(&kept, &ipv4);

	if (count)
		__sync_fetch_and_add(count, 1);
	if (!ipv4)
		return 0;
	return skb->len < snap_len ? skb->len : snap_len;
}

char LICENSE[] SEC("license") = "GPL";
