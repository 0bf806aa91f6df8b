/* SPDX-License-Identifier: GPL-2.0 */
/* The open-coded numeric iterator kfuncs (kernel 6.4+) as the selftests' bpf_experimental.h
 * declares them; libbpf 1.1's headers have neither these nor the bpf_for macro. */
#ifndef CORPUS_ITER_NUM_H
#define CORPUS_ITER_NUM_H

struct bpf_iter_num {
	__u64 __opaque[1];
} __attribute__((aligned(8)));

extern int bpf_iter_num_new(struct bpf_iter_num *it, int start, int end) __ksym;
extern int *bpf_iter_num_next(struct bpf_iter_num *it) __ksym;
extern void bpf_iter_num_destroy(struct bpf_iter_num *it) __ksym;

#endif
