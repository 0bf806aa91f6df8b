// SPDX-License-Identifier: GPL-2.0
/* A C twin of pybpf.bench.map_perf_progs (itself after samples/bpf/map_perf_test.bpf.c):
 * the same maps, by the same names, and programs doing the same map work per event, on the
 * syscalls/sys_enter_* tracepoints pybpf attaches them to (the sample's ksyscall probes
 * need kprobes). Loops are unrolled, as the assembled programs are. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define MAX_NR_CPUS 1024
#define HASH_ROUNDS 10
#define LPM_LOOKUPS 32
#define MAP_LOOKUPS 64
#define LRU_LOOKUPS 32

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, long);
	__uint(max_entries, 1000);
} hash_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, long);
	__uint(max_entries, 10000);
} lru_hash_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, long);
	__uint(max_entries, 10000);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
} nocommon_lru_hash_map SEC(".maps");

struct inner_lru {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, long);
	__uint(max_entries, 1000);
} inner_lru_hash_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_NR_CPUS);
	__uint(key_size, sizeof(__u32));
	__array(values, struct inner_lru);
} array_of_lru_hashs SEC(".maps") = {
	.values = { [0] = &inner_lru_hash_map },
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(long));
	__uint(max_entries, 1000);
} percpu_hash_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, long);
	__uint(max_entries, 1000);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} hash_map_alloc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(long));
	__uint(max_entries, 1000);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} percpu_hash_map_alloc SEC(".maps");

struct lpm_key {
	__u32 prefixlen;
	__u8 data[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(key_size, 8);
	__uint(value_size, sizeof(long));
	__uint(max_entries, 10000);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} lpm_trie_map_alloc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, long);
	__uint(max_entries, 1000);
} array_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, long);
	__uint(max_entries, 1000);
} lru_hash_lookup_map SEC(".maps");

/* struct trace_event_raw_sys_enter: common fields, __syscall_nr, args[6]. */
struct sys_enter {
	__u64 common;
	__s64 syscall_nr;
	__u64 args[6];
};

static __always_inline int stress_hash(void *map)
{
	__u32 key = bpf_get_current_pid_tgid();
	long init_val = 1;

#pragma unroll
	for (int i = 0; i < HASH_ROUNDS; i++) {
		bpf_map_update_elem(map, &key, &init_val, BPF_ANY);
		if (bpf_map_lookup_elem(map, &key))
			bpf_map_delete_elem(map, &key);
	}
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_getuid")
int stress_hmap(struct sys_enter *ctx)
{
	return stress_hash(&hash_map);
}

SEC("tracepoint/syscalls/sys_enter_geteuid")
int stress_percpu_hmap(struct sys_enter *ctx)
{
	return stress_hash(&percpu_hash_map);
}

SEC("tracepoint/syscalls/sys_enter_getgid")
int stress_hmap_alloc(struct sys_enter *ctx)
{
	return stress_hash(&hash_map_alloc);
}

SEC("tracepoint/syscalls/sys_enter_getegid")
int stress_percpu_hmap_alloc(struct sys_enter *ctx)
{
	return stress_hash(&percpu_hash_map_alloc);
}

/* connect(fd, uservaddr, addrlen): the four LRU tests, picked by a magic IPv6 address. */
SEC("tracepoint/syscalls/sys_enter_connect")
int stress_lru_hmap_alloc(struct sys_enter *ctx)
{
	struct {
		__u16 magic0;
		__u16 magic1;
		__u16 tcase;
		__u16 unused16;
		__u32 unused32;
		__u32 key;
	} test_params;
	long val = 1;
	__u32 key, cpu;
	void *inner;

	if (ctx->args[2] != 28)  /* sizeof(struct sockaddr_in6) */
		return 0;
	if (bpf_probe_read_user(&test_params, sizeof(test_params),
				(void *)(ctx->args[1] + 8)))  /* &sin6_addr */
		return 0;
	if (test_params.magic0 != 0xdead || test_params.magic1 != 0xbeef)
		return 0;
	if (test_params.tcase == 3) {
		key = test_params.key;
#pragma unroll
		for (int i = 0; i < LRU_LOOKUPS; i++) {
			bpf_map_lookup_elem(&lru_hash_lookup_map, &key);
			key++;
		}
		return 0;
	}
	key = bpf_get_prandom_u32();
	if (test_params.tcase == 0) {
		bpf_map_update_elem(&lru_hash_map, &key, &val, BPF_ANY);
	} else if (test_params.tcase == 1) {
		bpf_map_update_elem(&nocommon_lru_hash_map, &key, &val, BPF_ANY);
	} else if (test_params.tcase == 2) {
		cpu = bpf_get_smp_processor_id();
		inner = bpf_map_lookup_elem(&array_of_lru_hashs, &cpu);
		if (!inner)
			return 0;
		bpf_map_update_elem(inner, &key, &val, BPF_ANY);
	}
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_gettid")
int stress_lpm_trie_map_alloc(struct sys_enter *ctx)
{
	struct lpm_key key = { .prefixlen = 32, .data = { 192, 168, 0, 1 } };

#pragma unroll
	for (int i = 0; i < LPM_LOOKUPS; i++)
		bpf_map_lookup_elem(&lpm_trie_map_alloc, &key);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_getpgid")
int stress_hash_map_lookup(struct sys_enter *ctx)
{
	__u32 key = 1;

#pragma unroll
	for (int i = 0; i < MAP_LOOKUPS; i++)
		bpf_map_lookup_elem(&hash_map, &key);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_getppid")
int stress_array_map_lookup(struct sys_enter *ctx)
{
	__u32 key = 1;

#pragma unroll
	for (int i = 0; i < MAP_LOOKUPS; i++)
		bpf_map_lookup_elem(&array_map, &key);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
