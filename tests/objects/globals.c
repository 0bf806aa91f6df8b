// SPDX-License-Identifier: GPL-2.0
/* Global data in .data, .rodata (const volatile: set from user space before load), .bss
 * and custom .data.* / .rodata.* sections; static and global variables; a struct with
 * bitfields, an array, a string. The syscall program folds them into .bss results. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct settings {
	__u32 scale;
	char label[8];
	unsigned int enabled:1;
	unsigned int mode:3;
	__s16 offsets[3];
};

const volatile __u32 limit = 100;
const volatile struct settings settings = {
	.scale = 3, .label = "start", .enabled = 1, .mode = 5, .offsets = { -1, 0, 1 },
};
__u64 counter = 7;
static __u32 hidden_step = 2;
__s64 results[4];
__u32 calls;
__u32 tuned SEC(".data.tuning") = 11;
const volatile __u16 table[4] SEC(".rodata.table") = { 1, 2, 3, 4 };

SEC("syscall")
int fold_globals(void *ctx)
{
	calls++;
	counter += hidden_step;
	hidden_step += 1;
	results[0] = counter;
	results[1] = settings.enabled ? settings.scale * limit : 0;
	results[2] = settings.mode + settings.offsets[0] + settings.label[0];
	results[3] = tuned + table[3];
	return calls;
}

char LICENSE[] SEC("license") = "GPL";
