// SPDX-License-Identifier: MIT
/*
 * map_perf_trigger: the trigger loop of one map-perf test, in C, to check that pybpf's
 * Python trigger loop is not what limits `pybpf map-perf` on the kernel backend.
 *
 * It loads and attaches nothing: run it while `pybpf map-perf --c-trigger PATH` has the
 * programs attached (map-perf runs it in each child, right after its own loop for the same
 * test on the same CPU). It pins itself to CPU, makes MAX_CNT trigger syscalls and prints
 * the map-perf line with "(C trigger)" appended, and the same rate per second of the
 * process's CPU time (user + system: the programs run in the syscalls), which other load on
 * the machine does not disturb.
 *
 * Build: cc -O2 -o map_perf_trigger tools/map_perf_trigger.c
 * Usage: map_perf_trigger TEST CPU MAX_CNT LOOKUP_ENTRIES     (TEST: 0-10, the enum index)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const struct {
	const char *label;
	const char *unit;
	long nr;	/* syscall number; -1: connect() with the magic address */
	int tcase;	/* connect() test case */
	int per_event;
} tests[] = {
	{ "hash_map_perf pre-alloc", "events", SYS_getuid, 0, 1 },
	{ "percpu_hash_map_perf pre-alloc", "events", SYS_geteuid, 0, 1 },
	{ "hash_map_perf kmalloc", "events", SYS_getgid, 0, 1 },
	{ "percpu_hash_map_perf kmalloc", "events", SYS_getegid, 0, 1 },
	{ "lru_hash_map_perf pre-alloc", "events", -1, 0, 1 },
	{ "nocommon_lru_hash_map_perf pre-alloc", "events", -1, 1, 1 },
	{ "lpm_perf kmalloc", "events", SYS_gettid, 0, 1 },
	{ "hash_lookup", "lookups", SYS_getpgid, 0, 64 },
	{ "array_lookup", "lookups", SYS_getppid, 0, 64 },
	{ "inner_lru_hash_map_perf pre-alloc", "events", -1, 2, 1 },
	{ "lru_hash_lookup_perf pre-alloc", "events", -1, 3, 1 },
};

static unsigned long long clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	struct sockaddr_in6 addr = { .sin6_family = AF_INET6 };
	unsigned long long start, cpu_start, elapsed, cpu_time;
	unsigned int entries;
	long i, max_cnt;
	cpu_set_t set;
	int test, cpu;

	if (argc != 5) {
		fprintf(stderr, "usage: %s TEST CPU MAX_CNT LOOKUP_ENTRIES\n", argv[0]);
		return 2;
	}
	test = atoi(argv[1]);
	cpu = atoi(argv[2]);
	max_cnt = atol(argv[3]);
	entries = (unsigned int)atol(argv[4]);
	if (test < 0 || test >= (int)(sizeof(tests) / sizeof(tests[0])) || max_cnt < 1) {
		fprintf(stderr, "%s: bad TEST or MAX_CNT\n", argv[0]);
		return 2;
	}
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);

	/* host-order u16 words, as the programs read them */
	addr.sin6_addr.s6_addr16[0] = 0xdead;
	addr.sin6_addr.s6_addr16[1] = 0xbeef;
	addr.sin6_addr.s6_addr16[2] = tests[test].tcase;

	start = clock_ns(CLOCK_MONOTONIC);
	cpu_start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	if (tests[test].nr < 0) {
		for (i = 0; i < max_cnt; i++) {
			if (connect(-1, (struct sockaddr *)&addr, sizeof(addr)) != -1 ||
			    errno != EBADF) {
				fprintf(stderr, "connect(-1) did not fail with EBADF\n");
				return 1;
			}
			if (addr.sin6_addr.s6_addr32[3] < entries - 32)
				addr.sin6_addr.s6_addr32[3] += 32;
			else
				addr.sin6_addr.s6_addr32[3] = 0;
		}
	} else if (tests[test].nr == SYS_getpgid || tests[test].nr == SYS_getppid) {
		for (i = 0; i < max_cnt; i++)
			syscall(tests[test].nr, 0);
	} else {
		for (i = 0; i < max_cnt; i++)
			syscall(tests[test].nr);
	}
	elapsed = clock_ns(CLOCK_MONOTONIC) - start;
	cpu_time = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu_start;
	printf("%d:%s %lld %s per sec (C trigger; %lld per CPU-second)\n", cpu,
	       tests[test].label,
	       (long long)(max_cnt * 1000000000ll * tests[test].per_event / elapsed),
	       tests[test].unit,
	       (long long)(max_cnt * 1000000000ll * tests[test].per_event / cpu_time));
	return 0;
}
