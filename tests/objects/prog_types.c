// SPDX-License-Identifier: GPL-2.0
/* One small program per section name libbpf knows, for the program type and expected
 * attach type each name gives. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} socks SEC(".maps");

static __always_inline void hit(__u32 slot)
{
	__u64 *count = bpf_map_lookup_elem(&hits, &slot);

	if (count)
		__sync_fetch_and_add(count, 1);
}

SEC("xdp")
int on_xdp(struct xdp_md *ctx) { hit(0); return XDP_PASS; }

SEC("xdp.frags")
int on_xdp_frags(struct xdp_md *ctx) { hit(1); return XDP_PASS; }

SEC("socket")
int on_socket(struct __sk_buff *skb) { hit(2); return skb->len; }

SEC("tc")
int on_tc(struct __sk_buff *skb) { hit(3); return 0; }

SEC("classifier")
int on_classifier(struct __sk_buff *skb) { hit(4); return 0; }

SEC("tracepoint/syscalls/sys_enter_getppid")
int on_tracepoint(void *ctx) { hit(5); return 0; }

SEC("tp/syscalls/sys_enter_getpgid")
int on_tp(void *ctx) { hit(6); return 0; }

SEC("raw_tp/sys_enter")
int on_raw_tp(void *ctx) { hit(7); return 0; }

SEC("raw_tracepoint/sys_exit")
int on_raw_tracepoint(void *ctx) { hit(8); return 0; }

SEC("tp_btf/sys_enter")
int on_tp_btf(void *ctx) { hit(9); return 0; }

SEC("sk_skb/stream_parser")
int on_stream_parser(struct __sk_buff *skb) { return skb->len; }

SEC("sk_skb/stream_verdict")
int on_stream_verdict(struct __sk_buff *skb) { return bpf_sk_redirect_map(skb, &socks, 0, 0); }

SEC("sk_skb")
int on_sk_skb(struct __sk_buff *skb) { return SK_PASS; }

SEC("sk_msg")
int on_sk_msg(struct sk_msg_md *msg) { return SK_PASS; }

SEC("syscall")
int on_syscall(void *ctx) { hit(10); return 42; }

SEC("?socket")
int not_autoloaded(struct __sk_buff *skb) { return 0; }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
__u32 VERSION SEC("version") = 0x060c00;
