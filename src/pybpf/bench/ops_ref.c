/*
 * C reference for `python -m pybpf.bench.ops`: the same element and batch operations through
 * libbpf, on a map of the same shape, timed the same way (best of `repeat` rounds).
 * Built at run time into a temporary directory (gcc -O2 ops_ref.c -lbpf); nothing installed.
 *
 * usage: ops_ref ENTRIES OPS CHUNK REPEAT [OP]
 * prints one line per operation (or just OP): "<op> <ns per op or element>"
 */
#include <bpf/bpf.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void fill(int fd, uint32_t entries)
{
	for (uint32_t k = 0; k < entries; k++) {
		uint64_t v = k;

		if (bpf_map_update_elem(fd, &k, &v, BPF_ANY)) {
			perror("fill");
			exit(1);
		}
	}
}

static uint32_t entries, chunk;
static uint64_t rounds;
static uint32_t *keys;
static uint64_t *values;

static double op_lookup(int fd)
{
	uint64_t v;
	double t0 = now_ns();

	for (uint64_t i = 0; i < rounds; i++)
		for (uint32_t k = 0; k < entries; k++)
			bpf_map_lookup_elem(fd, &k, &v);
	return (now_ns() - t0) / (rounds * entries);
}

static double op_update(int fd)
{
	double t0 = now_ns();

	for (uint64_t i = 0; i < rounds; i++)
		for (uint32_t k = 0; k < entries; k++) {
			uint64_t v = k + i;

			bpf_map_update_elem(fd, &k, &v, BPF_ANY);
		}
	return (now_ns() - t0) / (rounds * entries);
}

static double op_delete(int fd)
{
	double spent = 0;

	for (uint64_t i = 0; i < rounds; i++) {
		double t0 = now_ns();

		for (uint32_t k = 0; k < entries; k++)
			bpf_map_delete_elem(fd, &k);
		spent += now_ns() - t0;
		fill(fd, entries);
	}
	return spent / (rounds * entries);
}

/* Whole-map walks in chunks, per element. */
static double op_batch_lookup(int fd)
{
	uint64_t seen = 0;
	uint32_t token = 0;
	double t0 = now_ns();

	for (uint64_t i = 0; i < rounds; i++) {
		void *in = NULL;

		for (;;) {
			uint32_t count = chunk;
			int err = bpf_map_lookup_batch(fd, in, &token, keys, values, &count, NULL);

			seen += count;
			if (err) {
				if (errno == ENOENT)
					break;
				perror("bpf_map_lookup_batch");
				exit(1);
			}
			in = &token;
		}
	}
	return (now_ns() - t0) / (seen ? seen : 1);
}

static double op_batch_update(int fd)
{
	for (uint32_t k = 0; k < entries; k++) {
		keys[k] = k;
		values[k] = k;
	}
	double t0 = now_ns();

	for (uint64_t i = 0; i < rounds; i++) {
		uint32_t count = entries;

		if (bpf_map_update_batch(fd, keys, values, &count, NULL)) {
			perror("bpf_map_update_batch");
			exit(1);
		}
	}
	return (now_ns() - t0) / (rounds * entries);
}

static const struct {
	const char *name;
	double (*run)(int fd);
} ops[] = {
	{"lookup", op_lookup},
	{"update", op_update},
	{"delete", op_delete},
	{"batch_lookup", op_batch_lookup},
	{"batch_update", op_batch_update},
};

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: %s ENTRIES OPS CHUNK REPEAT [OP]\n", argv[0]);
		return 2;
	}
	entries = strtoul(argv[1], NULL, 0);
	uint64_t nops = strtoull(argv[2], NULL, 0);
	chunk = strtoul(argv[3], NULL, 0);
	int repeat = atoi(argv[4]);
	const char *only = argc == 6 ? argv[5] : NULL;

	rounds = nops / entries ? nops / entries : 1;
	/* Batch buffers hold a whole chunk (or the whole map for the update batch). */
	size_t slots = entries > chunk ? entries : chunk;

	keys = calloc(slots, sizeof(*keys));
	values = calloc(slots, sizeof(*values));
	int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "ops_ref", 4, 8, entries, NULL);

	if (fd < 0 || !keys || !values) {
		perror("bpf_map_create");
		return 1;
	}
	fill(fd, entries);
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		double best = 1e30;

		if (only && strcmp(only, ops[i].name))
			continue;
		for (int r = 0; r < repeat; r++) {
			double t = ops[i].run(fd);

			if (t < best)
				best = t;
		}
		printf("%s %.1f\n", ops[i].name, best);
	}
	return 0;
}
