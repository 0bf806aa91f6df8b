/*
 * C reference for `python -m pybpf.bench.ops`: the same element and batch operations through
 * libbpf, on a map of the same shape, timed the same way (best of `repeat` rounds).
 * Built at run time into a temporary directory (gcc -O2 ops_ref.c -lbpf); nothing installed.
 *
 * usage: ops_ref ENTRIES OPS CHUNK REPEAT
 * prints one line per operation: "<op> <ns per op or element>"
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

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s ENTRIES OPS CHUNK REPEAT\n", argv[0]);
		return 2;
	}
	uint32_t entries = strtoul(argv[1], NULL, 0);
	uint64_t ops = strtoull(argv[2], NULL, 0);
	uint32_t chunk = strtoul(argv[3], NULL, 0);
	int repeat = atoi(argv[4]);
	uint64_t rounds = ops / entries ? ops / entries : 1;
	double best_lookup = 1e30, best_update = 1e30, best_delete = 1e30;
	double best_blookup = 1e30, best_bupdate = 1e30;
	uint32_t *keys = calloc(entries, sizeof(*keys));
	uint64_t *values = calloc(entries, sizeof(*values));
	uint32_t token = 0;

	int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "ops_ref", 4, 8, entries, NULL);

	if (fd < 0 || !keys || !values) {
		perror("bpf_map_create");
		return 1;
	}
	for (uint32_t k = 0; k < entries; k++) {
		keys[k] = k;
		values[k] = k;
	}
	fill(fd, entries);
	for (int r = 0; r < repeat; r++) {
		uint64_t v;
		double t0 = now_ns();

		for (uint64_t i = 0; i < rounds; i++)
			for (uint32_t k = 0; k < entries; k++)
				bpf_map_lookup_elem(fd, &k, &v);
		double t = (now_ns() - t0) / (rounds * entries);

		if (t < best_lookup)
			best_lookup = t;

		t0 = now_ns();
		for (uint64_t i = 0; i < rounds; i++)
			for (uint32_t k = 0; k < entries; k++) {
				v = k + i;
				bpf_map_update_elem(fd, &k, &v, BPF_ANY);
			}
		t = (now_ns() - t0) / (rounds * entries);
		if (t < best_update)
			best_update = t;

		double spent = 0;

		for (uint64_t i = 0; i < rounds; i++) {
			t0 = now_ns();
			for (uint32_t k = 0; k < entries; k++)
				bpf_map_delete_elem(fd, &k);
			spent += now_ns() - t0;
			fill(fd, entries);
		}
		t = spent / (rounds * entries);
		if (t < best_delete)
			best_delete = t;

		/* Batch lookup: whole-map walks in chunks, per element. */
		uint64_t seen = 0;

		t0 = now_ns();
		for (uint64_t i = 0; i < rounds; i++) {
			void *in = NULL;

			for (;;) {
				uint32_t count = chunk;
				int err = bpf_map_lookup_batch(fd, in, &token, keys, values, &count,
							       NULL);

				seen += count;
				if (err) {
					if (errno == ENOENT)
						break;
					perror("bpf_map_lookup_batch");
					return 1;
				}
				in = &token;
			}
		}
		t = (now_ns() - t0) / (seen ? seen : 1);
		if (t < best_blookup)
			best_blookup = t;

		for (uint32_t k = 0; k < entries; k++)
			keys[k] = k;
		t0 = now_ns();
		for (uint64_t i = 0; i < rounds; i++) {
			uint32_t count = entries;

			if (bpf_map_update_batch(fd, keys, values, &count, NULL)) {
				perror("bpf_map_update_batch");
				return 1;
			}
		}
		t = (now_ns() - t0) / (rounds * entries);
		if (t < best_bupdate)
			best_bupdate = t;
	}
	printf("lookup %.1f\nupdate %.1f\ndelete %.1f\nbatch_lookup %.1f\nbatch_update %.1f\n",
	       best_lookup, best_update, best_delete, best_blookup, best_bupdate);
	return 0;
}
