/*
 * pybpf._shm_maps: BPF array and hash maps in one shared memory segment (optional C extension;
 * its Python face is pybpf.shared).
 *
 * Rules it keeps:
 * - Everything lives in the segment and is addressed by offsets from its base (each process
 *   maps it at its own address): a header (magic, size, the segment lock, the table of attached
 *   pids, the table of map names: the "pins"), then a bump-allocated heap of map headers,
 *   buckets, elements and array values. Heap memory is never given back to the segment: a map
 *   lives as long as its segment.
 * - A segment is anonymous (MAP_SHARED | MAP_ANONYMOUS: shared with forked children) or a named
 *   POSIX shared-memory object. A named one is built under a temporary name and published with
 *   link(2), so a name never shows a half-built segment. Whoever removes a name (a reclaim of a
 *   stale segment, or unlink) holds flock(LOCK_EX) on the file it removes and first checks that
 *   the name still refers to that file, so two reclaimers never remove each other's segments.
 * - Semantics are the kernel's (kernel/bpf/hashtab.c, arraymap.c) as user space sees them
 *   through bpf(2), errno for errno, the same as the Python reference (pybpf.emulated.maps):
 *   update flags BPF_ANY / BPF_NOEXIST / BPF_EXIST (EINVAL for others, EEXIST, ENOENT), E2BIG
 *   for a full hash or an index past an array's end, EINVAL for an array delete, ENOTSUPP for an
 *   array lookup_and_delete. A hash key's bucket is jhash(key) & (n_buckets - 1), n_buckets the
 *   power-of-two roundup of max_entries, hashrnd 0 under BPF_F_ZERO_SEED; a bucket lists its
 *   elements newest first and an update of an existing key moves it to the front (the kernel
 *   links a new element there), so get_next_key walks in the kernel's order.
 * - Atomicity per element: every hash update or delete holds its bucket's spin lock, every
 *   array update its element's; writers also bump a sequence count around their change, and
 *   lookups take no lock but read between two equal even counts (read_begin / read_retry), so
 *   readers write nothing shared and never return a torn value. The kernel's array updates
 *   take no lock (BPF_F_LOCK aside) and a syscall lookup can see a value half-written by a
 *   program; here a reader never does, a stronger guarantee (documented in pybpf.shared).
 * - Locks are C11-style __atomic words in the segment holding the owner's pid, never a
 *   process-local mutex. A waiter that spins long checks whether the owner still lives; a dead
 *   owner (killed inside an operation) gives EOWNERDEAD instead of a hang.
 * - BPF_F_NO_PREALLOC: elements come from the segment in chunks as the map grows (ENOMEM when
 *   the segment is used up); without it every element is carved at create (ENOMEM then).
 *   Either way a map has max_entries elements at most (E2BIG beyond). Free elements are kept
 *   per CPU, as the kernel's pcpu_freelist keeps them (an insert takes from its CPU's list,
 *   then steals from the others'; a delete gives back to its CPU's), and so is the count of
 *   live elements (summed when read): processes on different CPUs write different cache
 *   lines. As in the kernel, an insert that finds every list empty while another process is
 *   giving an element back gets E2BIG.
 * - Python's GIL is held throughout an operation: operations take tens of ns, and a
 *   process's threads never hold a segment lock across a GIL switch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "_jhash.h"
#include "_helper_gil.h"
#include "_int_cache.h"
#include "_pyattr.h"

#define SHM_MAGIC 0x4d48534650425950ULL /* "PYBPFSHM" read as a little-endian u64 */
#define SHM_VERSION 3 /* 2: a hash map's free elements on per-CPU lists; 3: LRU maps and
			* LPM tries */
#define MAX_PIDS 128
#define MAX_MAPS 256
#define MAP_NAME_LEN 64
#define SHM_DIR "/dev/shm/"
#define NIL UINT32_MAX
#define HEAP_ALIGN 64
#define MIN_CHUNK_SHIFT 6   /* at least 64 elements per chunk */
#define MAX_CHUNKS 4096
#define FREE_LISTS 64      /* a hash map's free lists, one per CPU (CPU mod 64): a power of 2 */

/* uapi numbers (include/uapi/linux/bpf.h) */
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_HASH 5
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_LRU_HASH 9
#define BPF_MAP_TYPE_LRU_PERCPU_HASH 10
#define BPF_MAP_TYPE_LPM_TRIE 11
#define LPM_DATA_SIZE_MAX 256
#define LPM_KEY_SIZE_MIN 5
#define LPM_KEY_SIZE_MAX (4 + LPM_DATA_SIZE_MAX)
#define LPM_NODE_HEADER 24 /* sizeof(struct lpm_trie_node) in the kernel */
#define LPM_VAL_SIZE_MAX (KMALLOC_MAX_SIZE - LPM_DATA_SIZE_MAX - LPM_NODE_HEADER)
#define PCPU_MIN_UNIT_SIZE 32768 /* the largest per-CPU value the kernel takes */
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_EXIST 2
#define BPF_F_LOCK 4
#define BPF_F_NO_PREALLOC 1u
#define BPF_F_NO_COMMON_LRU 2u
#define BPF_F_ZERO_SEED (1u << 6)
#define ENOTSUPP 524
#define KMALLOC_MAX_SIZE (4u << 20)
#define HTAB_ELEM_SIZE 48 /* sizeof(struct htab_elem) on x86-64: the kernel's size limit */
#define BUCKET_SIZE 16    /* sizeof(struct bucket): the kernel's n_buckets limit */

struct pid_slot {
	int32_t pid;
	uint32_t pad;
	uint64_t start; /* /proc/PID/stat's starttime: a reused pid is another process */
};

struct name_slot {
	char name[MAP_NAME_LEN];
	uint64_t off; /* the map's header */
};

struct seg_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_size;
	uint64_t size;
	uint32_t lock;     /* heap, pid table and name table */
	uint32_t nmaps;
	uint64_t heap_start;
	uint64_t heap_next;
	struct pid_slot pids[MAX_PIDS];
	struct name_slot maps[MAX_MAPS];
};

struct map_hdr {
	uint32_t type, key_size, value_size, max_entries, map_flags;
	uint32_t n_buckets, hashrnd;
	uint32_t elem_size; /* stride of hash elements / array elements / trie nodes */
	uint32_t capacity;  /* hash elements or trie nodes the map's chunks hold in all */
	uint32_t value_off; /* where the value starts inside an element */
	uint32_t chunk_shift, nchunks;
	uint32_t grow_lock; /* serialises chunk growth (BPF_F_NO_PREALLOC) */
	uint32_t ncpus;     /* per-CPU maps: the CPUs a value has a slot for (else 1) */
	uint32_t data_size; /* an element's value bytes: value_size, or per CPU
			     * ncpus * round_up(value_size, 8), the syscall's layout */
	uint64_t buckets_off; /* hash: n_buckets struct bucket */
	uint64_t values_off;  /* array: max_entries elements */
	uint64_t lists_off;   /* hash: FREE_LISTS struct free_list, a CPU's each (an LRU map's
			       * hold its count only) */
	uint32_t lru_cpus;    /* LRU: the CPUs it has lists for */
	uint32_t lru_target_free;
	uint64_t lru_nodes_off, lru_lists_off, lru_locals_off; /* LRU: see _shm_lru.h */
	uint64_t chunks[];    /* hash: nchunks offsets of element chunks, 0 until carved */
};

struct bucket { /* 16 bytes, sizeof(struct bucket) in the kernel: 4 per cache line */
	uint32_t lock;
	uint32_t seq;  /* odd while a writer changes the chain or a value (see read_begin) */
	uint32_t head; /* first slot, NIL when empty */
	uint32_t pad;
};

/* An array element: its lock and sequence, then the value at value_off (8). */
struct aelem {
	uint32_t lock;
	uint32_t seq;
};

/* A CPU's free elements and its share of the count, on a cache line of its own (the kernel's
 * pcpu_freelist, and its per-CPU element count): an insert takes an element from its CPU's
 * list and a delete gives it back there, so processes on other CPUs write other lines. */
struct free_list {
	uint64_t head;  /* (tag << 32) | first free slot */
	int64_t count;  /* elements inserted minus deleted on this CPU (a share: may be < 0) */
	uint8_t pad[48];
};

struct helem { /* key at +8, value at value_off */
	uint32_t next;
	uint32_t hash;
};

/* -- pid, locks ------------------------------------------------------------------------- */

static uint32_t my_pid; /* cached: getpid() is a system call; refreshed after fork */

static void refresh_pid(void) { my_pid = (uint32_t)getpid(); }

/* /proc/PID/stat's state (field 3) and starttime (field 22, counted after the ')' that ends
 * the command name); 0 when unreadable. */
static uint64_t proc_stat(int pid, char *state)
{
	char path[64], buf[1024];
	*state = '?';
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return 0;
	*state = p[2];
	int field = 2;
	for (p++; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	return strtoull(p, NULL, 10);
}

static uint64_t proc_start_time(int pid)
{
	char state;
	return proc_stat(pid, &state);
}

/* A recorded process lives when its pid exists, is no zombie, and started when it was
 * recorded (0: not known). */
static int pid_alive(int pid, uint64_t start)
{
	if (pid <= 0)
		return 0;
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return 0;
	char state;
	uint64_t now = proc_stat(pid, &state);
	if (state == 'Z' || state == 'X')
		return 0;
	return now == 0 || start == 0 || now == start;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* What this process waited for on its segments (module function waits()): locks it found
 * held by another process, and lookups that read again because a writer was changing what
 * they read. Counted on the slow paths only, in this process's memory (its threads add
 * atomically). */
static uint64_t lock_waits, read_waits;

/*
 * The holds of segment locks this process makes while a trace is on (module function
 * lock_trace): each lock's address and the CLOCK_MONOTONIC ns at which it was taken and let
 * go, the last ``holds_cap`` of them (a ring: a test's steady state, not its start), what
 * pybpf.bench.shm_contention replays to simulate more processes than the host has
 * CPUs. The holds of the thread that began the trace (map-perf's processes have one each;
 * another thread's would race on the ring). Off, a lock and an unlock test a pointer.
 */
struct lock_hold {
	uint64_t lock, taken, released;
};
static struct lock_hold *holds;  /* NULL: no trace */
static size_t holds_cap, holds_made;  /* holds_made % holds_cap: the next to write */
static double clock_read_ns;  /* what a clock read cost as the trace began */
static pthread_t trace_thread;  /* the thread that began the trace: the only one recorded */
/* the holds not let go yet, by index (locks nest: the common LRU lists', then the buckets
 * of their evictions) */
#define OPEN_HOLDS 8
static size_t open_holds[OPEN_HOLDS];
static int n_open;

static uint64_t monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void forget_open(int i)
{
	for (n_open--; i < n_open; i++)
		open_holds[i] = open_holds[i + 1];
}

static void hold_taken(uint32_t *lock)
{
	size_t at = holds_made++ % holds_cap;
	for (int i = 0; i < n_open; i++)
		if (open_holds[i] == at)
			forget_open(i--);  /* written over while held: its end is not recorded */
	if (n_open == OPEN_HOLDS)
		forget_open(0);
	holds[at] = (struct lock_hold){(uintptr_t)lock, monotonic_ns(), 0};
	open_holds[n_open++] = at;
}

static void hold_released(uint32_t *lock)
{
	for (int i = n_open - 1; i >= 0; i--) {
		if (holds[open_holds[i]].lock != (uintptr_t)lock)
			continue;
		holds[open_holds[i]].released = monotonic_ns();
		forget_open(i);
		return;
	}
}

static int spin_lock_slow(uint32_t *lock)
{
	unsigned long spins = 0;
	__atomic_add_fetch(&lock_waits, 1, __ATOMIC_RELAXED);
	for (;;) {
		uint32_t owner = __atomic_load_n(lock, __ATOMIC_RELAXED);
		if (owner == 0) {
			uint32_t zero = 0;
			if (__atomic_compare_exchange_n(lock, &zero, my_pid, 0, __ATOMIC_ACQUIRE,
							__ATOMIC_RELAXED))
				return 0;
			continue;
		}
		if (++spins < 256) {
			cpu_relax();
			continue;
		}
		sched_yield();
		if ((spins & 4095) == 0 && !pid_alive((int)owner, 0) &&
		    __atomic_load_n(lock, __ATOMIC_RELAXED) == owner) {
			errno = EOWNERDEAD;
			return (int)owner;
		}
	}
}

/* 0, or (errno EOWNERDEAD) the pid of the dead process that holds the lock */
static inline int spin_lock(uint32_t *lock)
{
	uint32_t zero = 0;
	int dead = 0;
	if (!__builtin_expect(__atomic_compare_exchange_n(lock, &zero, my_pid, 0, __ATOMIC_ACQUIRE,
							  __ATOMIC_RELAXED), 1))
		dead = spin_lock_slow(lock);
	if (__builtin_expect(holds != NULL, 0) && dead == 0
	    && pthread_equal(pthread_self(), trace_thread))
		hold_taken(lock);
	return dead;
}

static inline void spin_unlock(uint32_t *lock)
{
	if (__builtin_expect(holds != NULL, 0) && pthread_equal(pthread_self(), trace_thread))
		hold_released(lock);
	__atomic_store_n(lock, 0, __ATOMIC_RELEASE);
}

/*
 * Lookups write nothing: a reader takes no lock (which would bounce the bucket's cache line
 * between the processes reading it) but reads under a sequence count, as the kernel's
 * seqcount_t: a writer, holding the lock, makes the count odd, changes the chain or a value,
 * and makes it even again; a reader notes an even count, reads, and reads again if the count
 * moved meanwhile. Elements live in the segment's pool and are never unmapped, so a reader
 * that follows a link changed under it reads stale memory, never foreign memory, and the
 * count sends it back. A reader never returns a torn value.
 */
static inline void write_begin(uint32_t *seq)
{
	__atomic_store_n(seq, *seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void write_end(uint32_t *seq)
{
	__atomic_store_n(seq, *seq + 1, __ATOMIC_RELEASE);
}

static int pid_alive(int pid, uint64_t start);

static int read_begin_slow(uint32_t *seq, uint32_t *lock, uint32_t *start)
{
	unsigned long spins = 0;
	__atomic_add_fetch(&read_waits, 1, __ATOMIC_RELAXED);
	for (;;) {
		uint32_t s = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
		if (!(s & 1)) {
			*start = s;
			return 0;
		}
		if (++spins < 256) {
			cpu_relax();
			continue;
		}
		sched_yield();
		uint32_t owner = __atomic_load_n(lock, __ATOMIC_RELAXED);
		if ((spins & 4095) == 0 && owner && !pid_alive((int)owner, 0) &&
		    __atomic_load_n(seq, __ATOMIC_RELAXED) == s) {
			errno = EOWNERDEAD;
			return (int)owner;
		}
	}
}

/* 0 with the even count in *start, or (a writer died mid-write) the dead writer's pid. */
static inline int read_begin(uint32_t *seq, uint32_t *lock, uint32_t *start)
{
	uint32_t s = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
	if (__builtin_expect(!(s & 1), 1)) {
		*start = s;
		return 0;
	}
	return read_begin_slow(seq, lock, start);
}

/* True when what was read since read_begin may be torn: read again. */
static inline int read_retry(uint32_t *seq, uint32_t start)
{
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__builtin_expect(__atomic_load_n(seq, __ATOMIC_RELAXED) == start, 1))
		return 0;
	__atomic_add_fetch(&read_waits, 1, __ATOMIC_RELAXED);
	return 1;
}

/* -- the segment object ------------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	uint8_t *base;   /* NULL once closed */
	uint64_t size;
	int fd;          /* -1 for an anonymous segment (or once closed) */
	PyObject *name;  /* str, or None */
	Py_ssize_t exports; /* live buffer views of the mapping: it stays mapped while any */
} SegmentObject;

typedef struct {
	PyObject_HEAD
	SegmentObject *seg;
	uint64_t off;
	PyObject *name;
	PyObject *errors; /* callable(errno, command, detail) -> exception, or NULL: OSError */
	/* copies of the immutable header fields, for the hot paths */
	uint32_t type, key_size, value_size, max_entries, map_flags, mask, hashrnd;
	uint32_t elem_size, value_off, chunk_shift;
	uint32_t ncpus, data_size, capacity; /* as in the header */
} MapObject;

static inline int is_array(uint32_t type)
{
	return type == BPF_MAP_TYPE_ARRAY || type == BPF_MAP_TYPE_PERCPU_ARRAY;
}

static inline int is_percpu(uint32_t type)
{
	return type == BPF_MAP_TYPE_PERCPU_HASH || type == BPF_MAP_TYPE_PERCPU_ARRAY ||
	       type == BPF_MAP_TYPE_LRU_PERCPU_HASH;
}

static inline int is_lru(uint32_t type)
{
	return type == BPF_MAP_TYPE_LRU_HASH || type == BPF_MAP_TYPE_LRU_PERCPU_HASH;
}

static inline int is_lpm(uint32_t type) { return type == BPF_MAP_TYPE_LPM_TRIE; }

static PyTypeObject SegmentType;
static PyTypeObject MapType;

static inline struct seg_hdr *seg_hdr(SegmentObject *s) { return (struct seg_hdr *)s->base; }

static PyObject *os_error(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
	va_end(ap);
	if (!msg)
		return NULL;
	PyObject *args = Py_BuildValue("(iN)", err, msg);
	if (args) {
		PyErr_SetObject(PyExc_OSError, args);
		Py_DECREF(args);
	}
	return NULL;
}

static PyObject *owner_dead(int pid)
{
	return os_error(EOWNERDEAD, "process %d died holding a lock of this segment (killed "
			"inside an operation): the segment may be inconsistent; unlink it and "
			"create it again", pid);
}

static inline uint64_t round_up64(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Bump allocation from the heap under the segment lock: an offset, 0 when it does not fit
 * (*lock_dead set when the lock's owner died). */
static uint64_t seg_alloc(struct seg_hdr *h, uint64_t bytes, int *lock_dead)
{
	uint64_t off = 0;
	int dead = spin_lock(&h->lock);
	if (dead) {
		*lock_dead = dead;
		return 0;
	}
	uint64_t start = round_up64(h->heap_next, HEAP_ALIGN);
	if (start <= h->size && bytes <= h->size - start) {
		off = start;
		h->heap_next = start + bytes;
	}
	spin_unlock(&h->lock);
	return off;
}

static int check_open(SegmentObject *s)
{
	if (s->base == NULL) {
		os_error(EBADF, "the segment is closed");
		return -1;
	}
	return 0;
}

/* Record (pid, start) in the pid table, dropping dead entries first; called under no lock. */
static int register_pid(struct seg_hdr *h, int pid)
{
	uint64_t start = proc_start_time(pid);
	int dead = spin_lock(&h->lock);
	if (dead) {
		owner_dead(dead);
		return -1;
	}
	int free_slot = -1;
	for (int i = 0; i < MAX_PIDS; i++) {
		struct pid_slot *p = &h->pids[i];
		if (p->pid == pid && p->start == start) {
			spin_unlock(&h->lock);
			return 0;
		}
		if (p->pid && !pid_alive(p->pid, p->start))
			p->pid = 0;
		if (!p->pid && free_slot < 0)
			free_slot = i;
	}
	if (free_slot >= 0) {
		h->pids[free_slot].start = start;
		h->pids[free_slot].pid = pid;
	}
	spin_unlock(&h->lock);
	if (free_slot < 0) {
		os_error(EUSERS, "%d live processes are attached to this segment already, the most "
			 "it records", MAX_PIDS);
		return -1;
	}
	return 0;
}

static void init_header(struct seg_hdr *h, uint64_t size)
{
	memset(h, 0, sizeof(*h));
	h->version = SHM_VERSION;
	h->hdr_size = sizeof(*h);
	h->size = size;
	h->heap_start = h->heap_next = round_up64(sizeof(*h), HEAP_ALIGN);
	__atomic_store_n(&h->magic, SHM_MAGIC, __ATOMIC_RELEASE);
}

static int valid_name(const char *name)
{
	size_t n = strlen(name);
	return n > 0 && n < 200 && !strchr(name, '/') && name[0] != '.';
}

static int same_file(int fd, const char *path)
{
	struct stat a, b;
	return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino &&
	       a.st_dev == b.st_dev;
}

/* Map an open segment file; NULL with an exception when it is no pybpf segment. */
static uint8_t *map_file(int fd, const char *name, uint64_t *size)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		os_error(errno, "fstat of segment %s: %s", name, strerror(errno));
		return NULL;
	}
	if ((uint64_t)st.st_size < sizeof(struct seg_hdr)) {
		os_error(EINVAL, "%s is not a pybpf segment (%lld bytes)", name,
			 (long long)st.st_size);
		return NULL;
	}
	uint8_t *base = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		os_error(errno, "mmap of segment %s: %s", name, strerror(errno));
		return NULL;
	}
	struct seg_hdr *h = (struct seg_hdr *)base;
	if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC ||
	    h->version != SHM_VERSION || h->size != (uint64_t)st.st_size) {
		munmap(base, st.st_size);
		os_error(EINVAL, "%s is not a pybpf segment of version %d", name, SHM_VERSION);
		return NULL;
	}
	*size = st.st_size;
	return base;
}

/* The live processes of the segment file open at fd (under its flock): a list of pids. */
static PyObject *live_owners(int fd, const char *name)
{
	uint64_t size;
	uint8_t *base = map_file(fd, name, &size);
	if (!base)
		return NULL;
	struct seg_hdr *h = (struct seg_hdr *)base;
	PyObject *pids = PyList_New(0);
	for (int i = 0; pids && i < MAX_PIDS; i++) {
		int pid = __atomic_load_n(&h->pids[i].pid, __ATOMIC_ACQUIRE);
		if (pid && pid_alive(pid, h->pids[i].start)) {
			PyObject *p = PyLong_FromLong(pid);
			if (!p || PyList_Append(pids, p) < 0)
				Py_CLEAR(pids);
			Py_XDECREF(p);
		}
	}
	munmap(base, size);
	return pids;
}

/* Build a segment under a temporary name and publish it as `name` with link(2): the open fd
 * and its mapping, or -1 (errno EEXIST when the name is taken) with *base unset. */
static int build_and_link(const char *name, uint64_t size, uint8_t **base)
{
	char tmp[256], tmp_path[300], path[300];
	static unsigned serial;
	snprintf(tmp, sizeof(tmp), "/.pybpf-new-%d-%u-%ld", (int)getpid(), serial++,
		 (long)time(NULL));
	snprintf(tmp_path, sizeof(tmp_path), SHM_DIR "%s", tmp + 1);
	snprintf(path, sizeof(path), SHM_DIR "%s", name);
	int fd = shm_open(tmp, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		return -1;
	int err = 0;
	uint8_t *b = MAP_FAILED;
	if (ftruncate(fd, (off_t)size) != 0)
		err = errno;
	if (!err) {
		b = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (b == MAP_FAILED)
			err = errno;
	}
	if (!err) {
		init_header((struct seg_hdr *)b, size);
		if (register_pid((struct seg_hdr *)b, (int)my_pid) != 0) {
			PyErr_Clear();
			err = EUSERS;
		}
	}
	if (!err && link(tmp_path, path) != 0)
		err = errno;
	shm_unlink(tmp);
	if (err) {
		if (b != MAP_FAILED)
			munmap(b, size);
		close(fd);
		errno = err;
		return -1;
	}
	*base = b;
	return fd;
}

/* Segment(name, size, create): create=True makes it (reclaiming a stale one of that name),
 * False attaches; name None makes an anonymous segment of `size` bytes. */
static PyObject *Segment_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"name", "size", "create", NULL};
	PyObject *name_obj;
	unsigned long long size = 0;
	int create = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "OKp", kwlist, &name_obj, &size, &create))
		return NULL;
	SegmentObject *self = (SegmentObject *)type->tp_alloc(type, 0);
	if (!self)
		return NULL;
	self->fd = -1;
	Py_INCREF(name_obj);
	self->name = name_obj;
	uint64_t min = round_up64(sizeof(struct seg_hdr), HEAP_ALIGN);
	if (create && size < min) {
		Py_DECREF(self);
		return os_error(EINVAL, "a segment needs at least %llu bytes for its header, got %llu",
				(unsigned long long)min, size);
	}
	if (name_obj == Py_None) {
		if (!create) {
			Py_DECREF(self);
			return os_error(EINVAL, "an anonymous segment cannot be attached to by name");
		}
		void *b = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			       -1, 0);
		if (b == MAP_FAILED) {
			Py_DECREF(self);
			return os_error(errno, "mmap of %llu bytes: %s", size, strerror(errno));
		}
		self->base = b;
		self->size = size;
		init_header((struct seg_hdr *)b, size);
		return (PyObject *)self;
	}
	const char *name = PyUnicode_AsUTF8(name_obj);
	if (!name) {
		Py_DECREF(self);
		return NULL;
	}
	if (!valid_name(name)) {
		Py_DECREF(self);
		return os_error(EINVAL, "segment name %R: use 1-199 characters, no '/', not "
				"starting with '.'", name_obj);
	}
	char shm_name[256], path[300];
	snprintf(shm_name, sizeof(shm_name), "/%s", name);
	snprintf(path, sizeof(path), SHM_DIR "%s", name);
	if (!create) {
		int fd = shm_open(shm_name, O_RDWR, 0);
		if (fd < 0) {
			int err = errno;
			Py_DECREF(self);
			if (err == ENOENT)
				return os_error(ENOENT, "no segment named %R: create it first "
						"(pybpf.shared.Segment.create(name, size))", name_obj);
			return os_error(err, "shm_open %s: %s", name, strerror(err));
		}
		/* Under LOCK_SH until registered: a reclaim (LOCK_EX) either finished before (the
		 * name then refers to another file: ENOENT-like, say so) or sees this process. */
		flock(fd, LOCK_SH);
		if (!same_file(fd, path)) {
			close(fd);
			Py_DECREF(self);
			return os_error(ENOENT, "segment %R was reclaimed while attaching: attach "
					"again", name_obj);
		}
		uint64_t sz;
		uint8_t *b = map_file(fd, name, &sz);
		if (!b) {
			close(fd);
			Py_DECREF(self);
			return NULL;
		}
		self->fd = fd;
		self->base = b;
		self->size = sz;
		int bad = register_pid((struct seg_hdr *)b, (int)my_pid);
		flock(fd, LOCK_UN);
		if (bad) {
			Py_DECREF(self);
			return NULL;
		}
		return (PyObject *)self;
	}
	for (int attempt = 0; attempt < 16; attempt++) {
		uint8_t *b;
		int fd = build_and_link(shm_name, size, &b);
		if (fd >= 0) {
			self->fd = fd;
			self->base = b;
			self->size = size;
			return (PyObject *)self;
		}
		if (errno != EEXIST) {
			int err = errno;
			Py_DECREF(self);
			return os_error(err, "cannot create segment %s of %llu bytes: %s", name, size,
					strerror(err));
		}
		/* The name is taken: reclaim it when every process recorded there is dead. */
		int old = shm_open(shm_name, O_RDWR, 0);
		if (old < 0)
			continue; /* removed meanwhile: try again */
		flock(old, LOCK_EX);
		if (!same_file(old, path)) { /* someone reclaimed it first */
			close(old);
			continue;
		}
		PyObject *owners = live_owners(old, name);
		if (!owners) { /* not a pybpf segment: leave it alone */
			close(old);
			Py_DECREF(self);
			return NULL;
		}
		if (PyList_GET_SIZE(owners) > 0) {
			close(old);
			Py_DECREF(self);
			PyObject *r = os_error(EEXIST, "segment %R is in use by pids %R: attach to it "
					       "(pybpf.shared.Segment.attach) or pick another name",
					       name_obj, owners);
			Py_DECREF(owners);
			return r;
		}
		Py_DECREF(owners);
		shm_unlink(shm_name); /* stale: its processes are all dead */
		close(old);
	}
	Py_DECREF(self);
	return os_error(EBUSY, "segment %R: the name kept changing hands while reclaiming it",
			name_obj);
}

static void segment_unmap(SegmentObject *self)
{
	if (self->base) {
		munmap(self->base, self->size);
		self->base = NULL;
	}
	if (self->fd >= 0) {
		close(self->fd);
		self->fd = -1;
	}
}

static void Segment_dealloc(SegmentObject *self)
{
	segment_unmap(self);
	Py_XDECREF(self->name);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

/* close(): drop this process from the pid table and unmap (maps of it then give EBADF). */
static PyObject *Segment_close(SegmentObject *self, PyObject *unused)
{
	if (self->exports) {
		PyErr_Format(PyExc_BufferError, "the segment has %zd views of its memory in use (map "
			     "values of an emulated system using it): close that system first",
			     self->exports);
		return NULL;
	}
	if (self->base && self->fd >= 0) {
		struct seg_hdr *h = seg_hdr(self);
		if (spin_lock(&h->lock) == 0) {
			for (int i = 0; i < MAX_PIDS; i++)
				if (h->pids[i].pid == (int32_t)my_pid)
					h->pids[i].pid = 0;
			spin_unlock(&h->lock);
		}
	}
	segment_unmap(self);
	Py_RETURN_NONE;
}

/* register(): record the calling process (a forked child) in the pid table. */
static PyObject *Segment_register(SegmentObject *self, PyObject *unused)
{
	if (check_open(self) < 0 || register_pid(seg_hdr(self), (int)my_pid) < 0)
		return NULL;
	Py_RETURN_NONE;
}

/* The pids recorded in the table, live ones only. */
static PyObject *Segment_pids(SegmentObject *self, PyObject *unused)
{
	if (check_open(self) < 0)
		return NULL;
	struct seg_hdr *h = seg_hdr(self);
	PyObject *out = PyList_New(0);
	for (int i = 0; out && i < MAX_PIDS; i++) {
		int pid = __atomic_load_n(&h->pids[i].pid, __ATOMIC_ACQUIRE);
		if (pid && pid_alive(pid, h->pids[i].start)) {
			PyObject *p = PyLong_FromLong(pid);
			if (!p || PyList_Append(out, p) < 0)
				Py_CLEAR(out);
			Py_XDECREF(p);
		}
	}
	return out;
}

/* unlink(name): remove the named segment, holding its flock and checking it is still the
 * file the name refers to. Mappings stay valid until closed. */
static PyObject *shm_unlink_name(PyObject *module, PyObject *name_obj)
{
	const char *name = PyUnicode_AsUTF8(name_obj);
	if (!name)
		return NULL;
	if (!valid_name(name))
		return os_error(EINVAL, "segment name %R is not valid", name_obj);
	char shm_name[256], path[300];
	snprintf(shm_name, sizeof(shm_name), "/%s", name);
	snprintf(path, sizeof(path), SHM_DIR "%s", name);
	int fd = shm_open(shm_name, O_RDWR, 0);
	if (fd < 0)
		return os_error(errno, "segment %R: %s", name_obj, strerror(errno));
	flock(fd, LOCK_EX);
	int ok = same_file(fd, path) && shm_unlink(shm_name) == 0;
	int err = errno;
	close(fd);
	if (!ok)
		return os_error(err, "segment %R: %s", name_obj, strerror(err));
	Py_RETURN_NONE;
}

static PyObject *Segment_usage(SegmentObject *self, PyObject *unused)
{
	if (check_open(self) < 0)
		return NULL;
	struct seg_hdr *h = seg_hdr(self);
	uint64_t next = __atomic_load_n(&h->heap_next, __ATOMIC_RELAXED);
	return Py_BuildValue("(KKK)", (unsigned long long)h->size,
			     (unsigned long long)h->heap_start, (unsigned long long)next);
}

static PyObject *map_object(SegmentObject *seg, uint64_t off, const char *name)
{
	MapObject *m = PyObject_New(MapObject, &MapType);
	if (!m)
		return NULL;
	struct map_hdr *h = (struct map_hdr *)(seg->base + off);
	Py_INCREF(seg);
	m->seg = seg;
	m->off = off;
	m->name = PyUnicode_FromString(name);
	m->errors = NULL;
	m->type = h->type;
	m->key_size = h->key_size;
	m->value_size = h->value_size;
	m->max_entries = h->max_entries;
	m->map_flags = h->map_flags;
	m->mask = h->n_buckets - 1;
	m->hashrnd = h->hashrnd;
	m->elem_size = h->elem_size;
	m->value_off = h->value_off;
	m->chunk_shift = h->chunk_shift;
	m->ncpus = h->ncpus;
	m->data_size = h->data_size;
	m->capacity = h->capacity;
	if (!m->name) {
		Py_DECREF(m);
		return NULL;
	}
	return (PyObject *)m;
}

static int find_name(struct seg_hdr *h, const char *name)
{
	uint32_t n = __atomic_load_n(&h->nmaps, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n && i < MAX_MAPS; i++)
		if (strncmp(h->maps[i].name, name, MAP_NAME_LEN) == 0)
			return (int)i;
	return -1;
}

static uint32_t roundup_pow_of_two(uint32_t n)
{
	uint32_t p = 1;
	while (p < n)
		p <<= 1;
	return p;
}

/* htab_map_alloc_check / array_map_alloc_check for the flags shared maps take: an errno and
 * a message, 0 when the attributes are good. */
static int check_create(uint32_t type, uint32_t key_size, uint32_t value_size,
			uint32_t max_entries, uint32_t flags, uint32_t ncpus, const char **why)
{
	if ((is_percpu(type) || is_lru(type)) && (ncpus < 1 || ncpus > 4096)) {
		*why = "a per-CPU or LRU map needs its number of CPUs (1 to 4096)";
		return EINVAL;
	}
	if (is_percpu(type) && round_up64(value_size, 8) > PCPU_MIN_UNIT_SIZE) {
		*why = "per-CPU values are limited to 32768 bytes";
		return E2BIG;
	}
	if (is_percpu(type) && (uint64_t)ncpus * round_up64(value_size, 8) > INT32_MAX) {
		*why = "a per-CPU value for every CPU is over INT_MAX bytes";
		return E2BIG;
	}
	if (is_lpm(type)) { /* trie_alloc's checks */
		if (!max_entries) {
			*why = "max_entries must be at least 1";
			return EINVAL;
		}
		if (flags != BPF_F_NO_PREALLOC) {
			*why = "LPM tries must be created with BPF_F_NO_PREALLOC (and no other flag "
			       "here)";
			return EINVAL;
		}
		if (key_size < LPM_KEY_SIZE_MIN || key_size > LPM_KEY_SIZE_MAX) {
			*why = "an LPM key is a u32 prefixlen plus 1..256 data bytes (5..260)";
			return EINVAL;
		}
		if (!value_size || value_size > LPM_VAL_SIZE_MAX) {
			*why = "an LPM value has 1 to KMALLOC_MAX_SIZE - 280 bytes";
			return EINVAL;
		}
		return 0;
	}
	if (is_lru(type)) {
		if (flags & ~(BPF_F_NO_PREALLOC | BPF_F_NO_COMMON_LRU | BPF_F_ZERO_SEED)) {
			*why = "shared LRU maps take BPF_F_NO_COMMON_LRU and BPF_F_ZERO_SEED only";
			return EINVAL;
		}
		if (flags & BPF_F_NO_PREALLOC) {
			*why = "LRU maps are always preallocated: drop BPF_F_NO_PREALLOC";
			return ENOTSUPP;
		}
		if ((flags & BPF_F_NO_COMMON_LRU) && max_entries % ncpus) {
			*why = "a BPF_F_NO_COMMON_LRU map's max_entries is a multiple of its CPUs "
			       "(htab_map_alloc rounds it up)";
			return EINVAL;
		}
	}
	if (type == BPF_MAP_TYPE_HASH || type == BPF_MAP_TYPE_PERCPU_HASH || is_lru(type)) {
		if (!is_lru(type) && (flags & ~(BPF_F_NO_PREALLOC | BPF_F_ZERO_SEED))) {
			*why = "shared hash maps take BPF_F_NO_PREALLOC and BPF_F_ZERO_SEED only";
			return EINVAL;
		}
		if (!max_entries || !key_size || !value_size) {
			*why = "max_entries, key_size and value_size must be > 0";
			return EINVAL;
		}
		if ((uint64_t)key_size + value_size >= KMALLOC_MAX_SIZE - HTAB_ELEM_SIZE) {
			*why = "key_size + value_size must stay below KMALLOC_MAX_SIZE - 48";
			return E2BIG;
		}
		if (max_entries > (1u << 31)) {
			*why = "max_entries is over 2^31";
			return E2BIG;
		}
		if (roundup_pow_of_two(max_entries) > UINT32_MAX / BUCKET_SIZE) {
			*why = "max_entries needs more buckets than the kernel allows";
			return E2BIG;
		}
		return 0;
	}
	if (is_array(type)) {
		if (!max_entries) {
			*why = "max_entries must be at least 1";
			return EINVAL;
		}
		if (key_size != 4) {
			*why = "array keys are u32 indices: key_size must be 4";
			return EINVAL;
		}
		if (!value_size) {
			*why = "value_size must be at least 1";
			return EINVAL;
		}
		if (flags) {
			*why = "shared array maps take no map_flags";
			return EINVAL;
		}
		if (value_size > INT32_MAX) {
			*why = "value_size is over INT_MAX";
			return E2BIG;
		}
		return 0;
	}
	*why = "shared segments hold HASH, PERCPU_HASH, LRU_HASH, LRU_PERCPU_HASH, LPM_TRIE, ARRAY "
	       "and PERCPU_ARRAY maps";
	return EINVAL;
}

static inline uint8_t *slot_elem(uint8_t *base, struct map_hdr *h, uint32_t slot)
{
	uint64_t chunk = __atomic_load_n(&h->chunks[slot >> h->chunk_shift], __ATOMIC_ACQUIRE);
	return base + chunk + (uint64_t)(slot & ((1u << h->chunk_shift) - 1)) * h->elem_size;
}

static inline struct free_list *free_lists(uint8_t *base, struct map_hdr *h)
{
	return (struct free_list *)(base + h->lists_off);
}

/* This CPU's list (sched_getcpu: vDSO and rseq, no system call) */
static inline struct free_list *this_list(uint8_t *base, struct map_hdr *h)
{
	int cpu = sched_getcpu();
	return &free_lists(base, h)[cpu < 0 ? 0 : (uint32_t)cpu & (FREE_LISTS - 1)];
}

/* Push slot onto list l (a tagged Treiber stack: processes on one CPU, or stealing, share a
 * list) */
static inline void list_push(uint8_t *base, struct map_hdr *h, struct free_list *l,
			     uint32_t slot)
{
	struct helem *e = (struct helem *)slot_elem(base, h, slot);
	uint64_t head = __atomic_load_n(&l->head, __ATOMIC_RELAXED);
	uint64_t next;
	do {
		__atomic_store_n(&e->next, (uint32_t)head, __ATOMIC_RELAXED);
		next = ((head >> 32) + 1) << 32 | slot;
	} while (!__atomic_compare_exchange_n(&l->head, &head, next, 1, __ATOMIC_RELEASE,
					      __ATOMIC_RELAXED));
}

/* Pop a slot of list l (the tag defeats ABA; a stale `next` read from an element taken
 * meanwhile is harmless, the pool is never unmapped): NIL when empty. */
static inline uint32_t list_pop(uint8_t *base, struct map_hdr *h, struct free_list *l)
{
	uint64_t head = __atomic_load_n(&l->head, __ATOMIC_ACQUIRE);
	for (;;) {
		uint32_t slot = (uint32_t)head;
		if (slot == NIL)
			return NIL;
		struct helem *e = (struct helem *)slot_elem(base, h, slot);
		uint32_t next = __atomic_load_n(&e->next, __ATOMIC_RELAXED);
		uint64_t want = ((head >> 32) + 1) << 32 | next;
		if (__atomic_compare_exchange_n(&l->head, &head, want, 1, __ATOMIC_ACQUIRE,
						__ATOMIC_ACQUIRE))
			return slot;
	}
}

/* A free slot, counted on this CPU: this CPU's list first, then the others' from the next
 * one on (pcpu_freelist_pop's order); NIL when every list is empty. */
static uint32_t freelist_pop(uint8_t *base, struct map_hdr *h)
{
	struct free_list *lists = free_lists(base, h), *mine = this_list(base, h);
	uint32_t at = (uint32_t)(mine - lists);
	for (uint32_t i = 0; i < FREE_LISTS; i++) {
		uint32_t s = list_pop(base, h, &lists[(at + i) & (FREE_LISTS - 1)]);
		if (s != NIL) {
			__atomic_add_fetch(&mine->count, 1, __ATOMIC_RELAXED);
			return s;
		}
	}
	return NIL;
}

/* A deleted element's slot back on this CPU's list, uncounted there */
static inline void freelist_push(uint8_t *base, struct map_hdr *h, uint32_t slot)
{
	struct free_list *mine = this_list(base, h);
	list_push(base, h, mine, slot);
	__atomic_sub_fetch(&mine->count, 1, __ATOMIC_RELAXED);
}

/* The slots [first, first + n) of a freshly carved chunk onto the lists: a preallocated map's
 * spread over the CPUs in blocks (pcpu_freelist_populate), a growing map's on this CPU's. */
static void freelist_push_range(uint8_t *base, struct map_hdr *h, uint32_t first, uint32_t n,
				uint32_t cpus)
{
	struct free_list *lists = free_lists(base, h), *mine = this_list(base, h);
	uint32_t per = (n + cpus - 1) / cpus;
	for (uint32_t i = 0; i < n; i++)
		list_push(base, h, cpus > 1 ? &lists[i / per] : mine, first + i);
}

/* Carve chunk `c` of the map's elements from the segment heap and free its slots, spread
 * over ``cpus`` lists (1: this CPU's): 0, ENOMEM, or EOWNERDEAD (*dead set). */
static int carve_chunk(uint8_t *base, struct map_hdr *h, uint32_t c, uint32_t cpus, int *dead)
{
	uint32_t per = 1u << h->chunk_shift;
	uint32_t first = c << h->chunk_shift;
	uint32_t n = h->capacity - first < per ? h->capacity - first : per;
	uint64_t off = seg_alloc((struct seg_hdr *)base, (uint64_t)n * h->elem_size, dead);
	if (!off)
		return *dead ? EOWNERDEAD : ENOMEM;
	__atomic_store_n(&h->chunks[c], off, __ATOMIC_RELEASE);
	if (is_lpm(h->type)) /* the trie's pool: list 0, taken and given under its lock */
		for (uint32_t i = 0; i < n; i++)
			list_push(base, h, free_lists(base, h), first + i);
	else if (!is_lru(h->type)) /* an LRU map's free elements are its LRU's FREE nodes */
		freelist_push_range(base, h, first, n, cpus);
	return 0;
}

#include "_shm_lru.h"

/* create_map(name, type, key_size, value_size, max_entries, flags, hashrnd, ncpus=1): ncpus
 * the CPUs a per-CPU map has a value for, an LRU map lists for */
static PyObject *Segment_create_map(SegmentObject *self, PyObject *args)
{
	const char *name;
	unsigned int type, key_size, value_size, max_entries, flags, hashrnd, ncpus = 1;
	if (!PyArg_ParseTuple(args, "sIIIIII|I", &name, &type, &key_size, &value_size,
			      &max_entries, &flags, &hashrnd, &ncpus))
		return NULL;
	if (check_open(self) < 0)
		return NULL;
	if (!name[0] || strlen(name) >= MAP_NAME_LEN)
		return os_error(EINVAL, "a map name has 1 to %d bytes", MAP_NAME_LEN - 1);
	const char *why = NULL;
	int err = check_create(type, key_size, value_size, max_entries, flags, ncpus, &why);
	if (err)
		return os_error(err, "%s", why);
	uint8_t *base = self->base;
	struct seg_hdr *sh = seg_hdr(self);
	uint32_t chunk_shift = 0, nchunks = 0, n_buckets = 0, elem_size, value_off;
	uint64_t need, elems_bytes;
	uint32_t lru_cpus = is_lru(type) ? ncpus : 0;
	if (!is_percpu(type))
		ncpus = 1;
	uint32_t data_size = is_percpu(type) ? ncpus * (uint32_t)round_up64(value_size, 8)
		: value_size;
	/* a hash map's elements; a trie's nodes: its elements, the intermediate nodes between
	 * them and the one an update makes before it frees the one it replaces (_shm_lpm.h) */
	uint32_t capacity = !is_lpm(type) ? max_entries
		: max_entries > (UINT32_MAX - 1) / 2 ? UINT32_MAX - 1 : 2 * max_entries;
	if (!is_array(type)) {
		n_buckets = is_lpm(type) ? 1 : roundup_pow_of_two(max_entries);
		chunk_shift = MIN_CHUNK_SHIFT;
		while (((uint64_t)capacity + (1u << chunk_shift) - 1) >> chunk_shift > MAX_CHUNKS)
			chunk_shift++;
		nchunks = (uint32_t)(((uint64_t)capacity + (1u << chunk_shift) - 1) >> chunk_shift);
		value_off = (uint32_t)round_up64(is_lpm(type) ? 16 + key_size - 4
						 : sizeof(struct helem) + key_size, 8);
		elem_size = value_off + (uint32_t)round_up64(data_size, 8);
		elems_bytes = (uint64_t)capacity * elem_size;
		need = sizeof(struct map_hdr) + (uint64_t)nchunks * 8 + 2 * HEAP_ALIGN +
		       FREE_LISTS * sizeof(struct free_list) +
		       (uint64_t)n_buckets * sizeof(struct bucket);
		if (!(flags & BPF_F_NO_PREALLOC))
			need += elems_bytes + (uint64_t)nchunks * HEAP_ALIGN;
		else
			need += (uint64_t)elem_size << chunk_shift; /* its first chunk, at least */
		if (lru_cpus)
			need += lru_bytes(max_entries, flags, lru_cpus);
	} else {
		value_off = sizeof(struct aelem); /* the element's lock and count, then the value */
		elem_size = value_off + (uint32_t)round_up64(data_size, 8);
		elems_bytes = (uint64_t)max_entries * elem_size;
		need = sizeof(struct map_hdr) + HEAP_ALIGN + elems_bytes;
	}
	int dead = spin_lock(&sh->lock);
	if (dead)
		return owner_dead(dead);
	if (find_name(sh, name) >= 0) {
		spin_unlock(&sh->lock);
		return os_error(EEXIST, "a map named '%s' exists in this segment: open it "
				"(Segment.open_map) or pick another name", name);
	}
	if (sh->nmaps >= MAX_MAPS) {
		spin_unlock(&sh->lock);
		return os_error(ENOSPC, "the segment's table of map names is full (%d maps)",
				MAX_MAPS);
	}
	uint64_t free_bytes = sh->size - round_up64(sh->heap_next, HEAP_ALIGN);
	if (round_up64(sh->heap_next, HEAP_ALIGN) > sh->size || need > free_bytes) {
		uint64_t used = sh->heap_next;
		spin_unlock(&sh->lock);
		return os_error(ENOMEM, "segment of %llu bytes is full: %llu bytes free, the map "
				"needs %llu%s; create the segment with size >= %llu",
				(unsigned long long)sh->size,
				(unsigned long long)(used > sh->size ? 0 : sh->size - used),
				(unsigned long long)need,
				(flags & BPF_F_NO_PREALLOC) ? " (its first chunk of elements)" : "",
				(unsigned long long)(used + need + HEAP_ALIGN));
	}
	/* Room for the map's own memory is checked: carve it, then publish its name. */
	uint64_t hdr_bytes = sizeof(struct map_hdr) + (uint64_t)nchunks * 8;
	uint64_t off = round_up64(sh->heap_next, HEAP_ALIGN);
	sh->heap_next = off + hdr_bytes;
	struct map_hdr *h = (struct map_hdr *)(base + off);
	memset(h, 0, hdr_bytes);
	h->type = type;
	h->key_size = key_size;
	h->value_size = value_size;
	h->max_entries = max_entries;
	h->map_flags = flags;
	h->elem_size = elem_size;
	h->capacity = capacity;
	h->value_off = value_off;
	h->chunk_shift = chunk_shift;
	h->nchunks = nchunks;
	h->ncpus = ncpus;
	h->data_size = data_size;
	h->n_buckets = n_buckets ? n_buckets : 1;
	h->hashrnd = (flags & BPF_F_ZERO_SEED) ? 0 : hashrnd;
	if (!is_array(type)) {
		h->lists_off = round_up64(sh->heap_next, HEAP_ALIGN);
		sh->heap_next = h->lists_off + FREE_LISTS * sizeof(struct free_list);
		struct free_list *lists = free_lists(base, h);
		memset(lists, 0, FREE_LISTS * sizeof(struct free_list));
		for (int i = 0; i < FREE_LISTS; i++)
			lists[i].head = NIL;
		if (lru_cpus) {
			h->lru_cpus = lru_cpus;
			lru_init(base, h, &sh->heap_next);
		}
	}
	uint64_t region_bytes = !is_array(type) ?
		(uint64_t)n_buckets * sizeof(struct bucket) : elems_bytes;
	uint64_t region = round_up64(sh->heap_next, HEAP_ALIGN);
	sh->heap_next = region + region_bytes;
	memset(base + region, 0, region_bytes); /* a fresh segment is zero; a reused one not */
	if (!is_array(type)) {
		h->buckets_off = region;
		struct bucket *b = (struct bucket *)(base + region);
		for (uint32_t i = 0; i < n_buckets; i++)
			b[i].head = NIL;
	} else {
		h->values_off = region;
	}
	spin_unlock(&sh->lock);
	if (!is_array(type)) {
		/* prealloc: every chunk now (room was checked, but a concurrent create may take
		 * it first: then ENOMEM and the map is not published). No prealloc: chunks as the
		 * map grows, the first one now. */
		uint32_t carve = (flags & BPF_F_NO_PREALLOC) ? 1 : nchunks;
		long cpus = sysconf(_SC_NPROCESSORS_CONF);
		cpus = cpus < 1 ? 1 : cpus > FREE_LISTS ? FREE_LISTS : cpus;
		for (uint32_t c = 0; c < carve; c++) {
			err = carve_chunk(base, h, c, (flags & BPF_F_NO_PREALLOC) ? 1 : (uint32_t)cpus,
					  &dead);
			if (err == EOWNERDEAD)
				return owner_dead(dead);
			if (err)
				return os_error(ENOMEM, "segment of %llu bytes is full while "
						"preallocating map '%s'; create the segment with a "
						"larger size", (unsigned long long)sh->size, name);
		}
	}
	dead = spin_lock(&sh->lock);
	if (dead)
		return owner_dead(dead);
	if (find_name(sh, name) >= 0 || sh->nmaps >= MAX_MAPS) {
		spin_unlock(&sh->lock);
		return os_error(EEXIST, "a map named '%s' was created meanwhile", name);
	}
	struct name_slot *slot = &sh->maps[sh->nmaps];
	strncpy(slot->name, name, MAP_NAME_LEN - 1);
	slot->off = off;
	__atomic_store_n(&sh->nmaps, sh->nmaps + 1, __ATOMIC_RELEASE);
	spin_unlock(&sh->lock);
	return map_object(self, off, name);
}

static PyObject *Segment_open_map(SegmentObject *self, PyObject *arg)
{
	const char *name = PyUnicode_AsUTF8(arg);
	if (!name || check_open(self) < 0)
		return NULL;
	struct seg_hdr *sh = seg_hdr(self);
	int dead = spin_lock(&sh->lock); /* unlink_name moves the table's entries */
	if (dead)
		return owner_dead(dead);
	int i = find_name(sh, name);
	uint64_t off = i < 0 ? 0 : sh->maps[i].off;
	spin_unlock(&sh->lock);
	if (i < 0)
		return os_error(ENOENT, "no map named %R in this segment", arg);
	return map_object(self, off, name);
}

static PyObject *Segment_map_names(SegmentObject *self, PyObject *unused)
{
	if (check_open(self) < 0)
		return NULL;
	struct seg_hdr *sh = seg_hdr(self);
	char names[MAX_MAPS][MAP_NAME_LEN];
	int dead = spin_lock(&sh->lock);
	if (dead)
		return owner_dead(dead);
	uint32_t n = sh->nmaps < MAX_MAPS ? sh->nmaps : MAX_MAPS;
	for (uint32_t i = 0; i < n; i++)
		memcpy(names[i], sh->maps[i].name, MAP_NAME_LEN);
	spin_unlock(&sh->lock);
	PyObject *out = PyList_New(0);
	for (uint32_t i = 0; out && i < n; i++) {
		PyObject *s = PyUnicode_FromStringAndSize(names[i], strnlen(names[i], MAP_NAME_LEN));
		if (!s || PyList_Append(out, s) < 0)
			Py_CLEAR(out);
		Py_XDECREF(s);
	}
	return out;
}

/* link_name(name, new_name): the map named ``name`` under a second name too (a pin) */
static PyObject *Segment_link_name(SegmentObject *self, PyObject *args)
{
	const char *name, *new_name;
	if (!PyArg_ParseTuple(args, "ss", &name, &new_name) || check_open(self) < 0)
		return NULL;
	if (!new_name[0] || strlen(new_name) >= MAP_NAME_LEN)
		return os_error(ENAMETOOLONG, "a name in a segment has 1 to %d bytes, %R has %zu",
				MAP_NAME_LEN - 1, PyTuple_GET_ITEM(args, 1), strlen(new_name));
	struct seg_hdr *sh = seg_hdr(self);
	int dead = spin_lock(&sh->lock);
	if (dead)
		return owner_dead(dead);
	int i = find_name(sh, name), err = 0;
	if (i < 0)
		err = ENOENT;
	else if (find_name(sh, new_name) >= 0)
		err = EEXIST;
	else if (sh->nmaps >= MAX_MAPS)
		err = ENOSPC;
	if (!err) {
		struct name_slot *slot = &sh->maps[sh->nmaps];
		memset(slot->name, 0, MAP_NAME_LEN);
		strncpy(slot->name, new_name, MAP_NAME_LEN - 1);
		slot->off = sh->maps[i].off;
		__atomic_store_n(&sh->nmaps, sh->nmaps + 1, __ATOMIC_RELEASE);
	}
	spin_unlock(&sh->lock);
	if (err == ENOENT)
		return os_error(ENOENT, "no map named '%s' in this segment", name);
	if (err == EEXIST)
		return os_error(EEXIST, "'%s' is taken in this segment", new_name);
	if (err)
		return os_error(ENOSPC, "the segment's table of names is full (%d)", MAX_MAPS);
	Py_RETURN_NONE;
}

/* unlink_name(name): the name goes from the table (the map's memory stays, as ever) */
static PyObject *Segment_unlink_name(SegmentObject *self, PyObject *arg)
{
	const char *name = PyUnicode_AsUTF8(arg);
	if (!name || check_open(self) < 0)
		return NULL;
	struct seg_hdr *sh = seg_hdr(self);
	int dead = spin_lock(&sh->lock);
	if (dead)
		return owner_dead(dead);
	int i = find_name(sh, name);
	if (i >= 0) {
		memmove(&sh->maps[i], &sh->maps[i + 1],
			(sh->nmaps - (uint32_t)i - 1) * sizeof(struct name_slot));
		__atomic_store_n(&sh->nmaps, sh->nmaps - 1, __ATOMIC_RELEASE);
	}
	spin_unlock(&sh->lock);
	if (i < 0)
		return os_error(ENOENT, "no map named %R in this segment", arg);
	Py_RETURN_NONE;
}

static PyObject *Segment_get_closed(SegmentObject *self, void *unused)
{
	return PyBool_FromLong(self->base == NULL);
}

/* The buffer protocol: the whole mapping, writable; the emulated backend's map families
 * (pybpf/emulated/maps/shared.py) slice their values out of it, and a live view keeps the
 * segment mapped (close() refuses while there are views). */
static int Segment_getbuffer(SegmentObject *self, Py_buffer *view, int flags)
{
	if (self->base == NULL) {
		PyErr_SetString(PyExc_ValueError, "the segment is closed");
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)self, self->base, (Py_ssize_t)self->size, 0,
			      flags) < 0)
		return -1;
	self->exports++;
	return 0;
}

static void Segment_releasebuffer(SegmentObject *self, Py_buffer *view)
{
	self->exports--;
}

static PyBufferProcs Segment_as_buffer = {
	.bf_getbuffer = (getbufferproc)Segment_getbuffer,
	.bf_releasebuffer = (releasebufferproc)Segment_releasebuffer,
};

static PyMethodDef Segment_methods[] = {
	{"create_map", (PyCFunction)Segment_create_map, METH_VARARGS,
	 "create_map(name, type, key_size, value_size, max_entries, flags, hashrnd) -> Map"},
	{"open_map", (PyCFunction)Segment_open_map, METH_O, "open_map(name) -> Map"},
	{"map_names", (PyCFunction)Segment_map_names, METH_NOARGS, "the names of the maps"},
	{"link_name", (PyCFunction)Segment_link_name, METH_VARARGS,
	 "link_name(name, new_name): a second name of a map (a pin)"},
	{"unlink_name", (PyCFunction)Segment_unlink_name, METH_O,
	 "unlink_name(name): remove a name (the map's memory stays)"},
	{"pids", (PyCFunction)Segment_pids, METH_NOARGS, "the live attached pids"},
	{"register", (PyCFunction)Segment_register, METH_NOARGS,
	 "record the calling process as attached (after fork)"},
	{"usage", (PyCFunction)Segment_usage, METH_NOARGS, "(size, heap start, heap used up to)"},
	{"close", (PyCFunction)Segment_close, METH_NOARGS, "detach and unmap"},
	{NULL}};

static PyGetSetDef Segment_getset[] = {
	{"closed", (getter)Segment_get_closed, NULL, "unmapped", NULL},
	{NULL}};

static PyMemberDef Segment_members[] = {
	{"name", T_OBJECT, offsetof(SegmentObject, name), READONLY, "name, or None"},
	{NULL}};

static PyTypeObject SegmentType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pybpf._shm_maps.Segment",
	.tp_basicsize = sizeof(SegmentObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Segment(name, size, create): a shared memory segment of maps",
	.tp_new = Segment_new,
	.tp_dealloc = (destructor)Segment_dealloc,
	.tp_methods = Segment_methods,
	.tp_getset = Segment_getset,
	.tp_members = Segment_members,
	.tp_as_buffer = &Segment_as_buffer,
};

/* -- the map object ------------------------------------------------------------------------ */

static void Map_dealloc(MapObject *self)
{
	Py_XDECREF(self->errors);
	Py_XDECREF(self->seg);
	Py_XDECREF(self->name);
	PyObject_Free(self);
}

static inline struct map_hdr *map_hdr(MapObject *m) { return (struct map_hdr *)(m->seg->base + m->off); }

/* The boundary of every element method: an OSError raised inside becomes what the map's
 * error factory makes of (errno, command, detail) (pybpf.shared: the BPFError subclass that
 * Map raises), so callers see one kind of error whichever path they take. */
static PyObject *map_result(MapObject *m, const char *command, PyObject *result)
{
	if (__builtin_expect(result != NULL, 1) || !m->errors ||
	    !PyErr_ExceptionMatches(PyExc_OSError))
		return result;
	PyObject *type, *value, *tb;
	PyErr_Fetch(&type, &value, &tb);
	PyErr_NormalizeException(&type, &value, &tb);
	PyObject *err = PyObject_GetAttrString(value, "errno");
	PyObject *detail = err ? PyObject_GetAttrString(value, "strerror") : NULL;
	PyObject *exc = detail ? PyObject_CallFunction(m->errors, "OsO", err, command, detail)
			       : NULL;
	Py_XDECREF(err);
	Py_XDECREF(detail);
	Py_XDECREF(type);
	Py_XDECREF(value);
	Py_XDECREF(tb);
	if (exc) {
		PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
		Py_DECREF(exc);
	}
	return NULL;
}

/* _set_errors(factory): how element errors are raised (see map_result). */
static PyObject *Map_set_errors(MapObject *m, PyObject *factory)
{
	if (!PyCallable_Check(factory)) {
		PyErr_SetString(PyExc_TypeError, "_set_errors needs a callable");
		return NULL;
	}
	Py_XSETREF(m->errors, Py_NewRef(factory));
	Py_RETURN_NONE;
}

/* The key's bytes, checked for length (EINVAL as bpf_copy_key) and an open segment. */
static inline int get_key(MapObject *m, PyObject *key, const uint8_t **out)
{
	if (__builtin_expect(m->seg->base == NULL, 0)) {
		os_error(EBADF, "the map's segment is closed");
		return -1;
	}
	if (__builtin_expect(!PyBytes_CheckExact(key), 0)) {
		PyErr_Format(PyExc_TypeError, "a key is bytes, got %.100s", Py_TYPE(key)->tp_name);
		return -1;
	}
	if (__builtin_expect((size_t)PyBytes_GET_SIZE(key) != m->key_size, 0)) {
		os_error(EINVAL, "the key has %zd bytes, the map's key_size is %u",
			 PyBytes_GET_SIZE(key), m->key_size);
		return -1;
	}
	*out = (const uint8_t *)PyBytes_AS_STRING(key);
	return 0;
}

static inline struct bucket *bucket_of(MapObject *m, uint32_t hash)
{
	return (struct bucket *)(m->seg->base + map_hdr(m)->buckets_off) + (hash & m->mask);
}

/* The element of key in its (locked) bucket, and the slot before it (NIL: the head). */
static inline uint32_t find_in_bucket(MapObject *m, struct bucket *b, const uint8_t *key,
				      uint32_t hash, uint32_t *prev)
{
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	uint32_t p = NIL;
	for (uint32_t s = b->head; s != NIL;) {
		struct helem *e = (struct helem *)slot_elem(base, h, s);
		if (e->hash == hash && memcmp((uint8_t *)e + sizeof(*e), key, m->key_size) == 0) {
			if (prev)
				*prev = p;
			return s;
		}
		p = s;
		s = e->next;
	}
	return NIL;
}

static inline void unlink_slot(MapObject *m, struct bucket *b, uint32_t slot, uint32_t prev)
{
	struct map_hdr *h = map_hdr(m);
	uint32_t next = ((struct helem *)slot_elem(m->seg->base, h, slot))->next;
	if (prev == NIL)
		b->head = next;
	else
		((struct helem *)slot_elem(m->seg->base, h, prev))->next = next;
}

static inline uint32_t array_index(const uint8_t *key)
{
	uint32_t index;
	memcpy(&index, key, 4); /* a u32 in host order, as the kernel reads it */
	return index;
}

static inline struct aelem *array_elem(MapObject *m, uint32_t index)
{
	return (struct aelem *)(m->seg->base + map_hdr(m)->values_off + (uint64_t)index * m->elem_size);
}

/* key's slot in bucket b, or NIL, walked without its lock (between read_begin and
 * read_retry: a changed chain is walked again). A walk longer than the map can hold went
 * round a chain changed under it. */
static inline uint32_t walk_chain(MapObject *m, struct bucket *b, const uint8_t *k,
				  uint32_t hash)
{
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	uint32_t steps = 0;
	uint32_t s = __atomic_load_n(&b->head, __ATOMIC_RELAXED);
	while (s != NIL && steps++ <= m->max_entries) {
		struct helem *e = (struct helem *)slot_elem(base, h, s);
		if (e->hash == hash && memcmp((uint8_t *)e + sizeof(*e), k, m->key_size) == 0)
			return s;
		s = __atomic_load_n(&e->next, __ATOMIC_RELAXED);
	}
	return NIL;
}

#include "_shm_lpm.h"

/* lookup(key) -> bytes: ENOENT when absent (an array: the index is past its end; a trie: no
 * prefix matches) */
static PyObject *Map_lookup_impl(MapObject *m, PyObject *key)
{
	const uint8_t *k;
	if (get_key(m, key, &k) < 0)
		return NULL;
	PyObject *out = PyBytes_FromStringAndSize(NULL, m->data_size);
	if (!out)
		return NULL;
	char *dst = PyBytes_AS_STRING(out);
	int dead;
	if (is_array(m->type)) {
		uint32_t index = array_index(k);
		if (index >= m->max_entries) {
			Py_DECREF(out);
			return os_error(ENOENT, "index %u is past the array's end (max_entries %u)",
					index, m->max_entries);
		}
		struct aelem *a = array_elem(m, index);
		uint32_t start;
		do {
			if ((dead = read_begin(&a->seq, &a->lock, &start))) {
				Py_DECREF(out);
				return owner_dead(dead);
			}
			memcpy(dst, (uint8_t *)a + m->value_off, m->data_size);
		} while (read_retry(&a->seq, start));
		return out;
	}
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	uint32_t hash = is_lpm(m->type) ? 0 : htab_map_hash(k, m->key_size, m->hashrnd);
	struct bucket *b = is_lpm(m->type) ? trie_of(m) : bucket_of(m, hash);
	uint32_t start, s;
	do {
		if ((dead = read_begin(&b->seq, &b->lock, &start))) {
			Py_DECREF(out);
			return owner_dead(dead);
		}
		s = is_lpm(m->type) ? lpm_walk(m, k) : walk_chain(m, b, k, hash);
		if (s != NIL)
			memcpy(dst, slot_elem(base, h, s) + m->value_off, m->data_size);
	} while (read_retry(&b->seq, start));
	if (s == NIL) {
		Py_DECREF(out);
		return os_error(ENOENT, is_lpm(m->type) ? "no prefix in the trie holds the key"
				: "key not found");
	}
	return out;
}

/* value_offset(key) -> int: where key's value lies from the segment's start, -1 when there
 * is none: what a program's bpf_map_lookup_elem points to (the live element, as the
 * kernel's lookup returns it; the element may be reused once deleted, as the kernel's). */
static PyObject *Map_value_offset_impl(MapObject *m, PyObject *key)
{
	const uint8_t *k;
	if (get_key(m, key, &k) < 0)
		return NULL;
	uint8_t *base = m->seg->base;
	if (is_array(m->type)) {
		uint32_t index = array_index(k);
		if (index >= m->max_entries)
			return PyLong_FromLong(-1);
		return PyLong_FromUnsignedLongLong(
			(uint64_t)((uint8_t *)array_elem(m, index) + m->value_off - base));
	}
	uint32_t s;
	int dead = 0;
	if (is_lpm(m->type)) {
		s = lpm_lookup(m, k, &dead);
		if (dead)
			return owner_dead(dead);
	} else {
		uint32_t hash = htab_map_hash(k, m->key_size, m->hashrnd), start;
		struct bucket *b = bucket_of(m, hash);
		do {
			if ((dead = read_begin(&b->seq, &b->lock, &start)))
				return owner_dead(dead);
			s = walk_chain(m, b, k, hash);
		} while (read_retry(&b->seq, start));
	}
	if (s == NIL)
		return PyLong_FromLong(-1);
	if (is_lru(m->type))
		lru_set_ref(base, map_hdr(m), s);
	return PyLong_FromUnsignedLongLong(
		(uint64_t)(slot_elem(base, map_hdr(m), s) + m->value_off - base));
}

/* The element ops' cores: 0 or the errno, *dead the owner of a lock it met held by a dead
 * process (EOWNERDEAD). They take no GIL and make no Python object: the native tier calls
 * them from machine code (pybpf_shm_update, ...), the methods below through element_error. */
/* A value written: all of it (cpu -1: a syscall's; a per-CPU map's round_up(value_size, 8)
 * bytes per CPU, as copy_map_value_long copies them), or from a program on a per-CPU map,
 * CPU cpu's value_size bytes, a new element's other CPUs' values zeroed (pcpu_init_value) */
static void put_value(MapObject *m, uint8_t *dst, const uint8_t *v, int64_t cpu, int fresh)
{
	if (cpu < 0) {
		memcpy(dst, v, m->data_size);
		return;
	}
	uint32_t stride = m->data_size / m->ncpus;
	if (fresh)
		for (uint32_t c = 0; c < m->ncpus; c++)
			if (c != (uint32_t)cpu)
				memset(dst + (uint64_t)c * stride, 0, stride);
	memcpy(dst + (uint64_t)cpu * stride, v, m->value_size);
}

static int array_update(MapObject *m, const uint8_t *k, const uint8_t *v, uint64_t flags,
			int64_t cpu, int *dead)
{
	uint32_t index = array_index(k);
	if ((flags & ~(uint64_t)BPF_F_LOCK) > BPF_EXIST)
		return EINVAL;
	if (index >= m->max_entries)
		return E2BIG;
	if (flags & BPF_NOEXIST)
		return EEXIST;
	struct aelem *a = array_elem(m, index);
	if ((*dead = spin_lock(&a->lock)))
		return EOWNERDEAD;
	write_begin(&a->seq);
	put_value(m, (uint8_t *)a + m->value_off, v, cpu, 0);
	write_end(&a->seq);
	spin_unlock(&a->lock);
	return 0;
}

/* Take a slot for a new element: a free one (freelist_pop), else where a BPF_F_NO_PREALLOC
 * map has chunks left, the next one carved (ENOMEM when the segment has no room). Every map
 * has max_entries slots at most, so no free slot is E2BIG: the map is full, or all that are
 * not in use are being given back by other processes at that moment (the kernel's
 * pcpu_freelist answers E2BIG then too). */
static uint32_t alloc_slot(MapObject *m, int *err, int *dead)
{
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	for (;;) {
		uint32_t s = freelist_pop(base, h);
		if (s != NIL)
			return s;
		if (!(h->map_flags & BPF_F_NO_PREALLOC)) {
			*err = E2BIG;
			return NIL;
		}
		if ((*dead = spin_lock(&h->grow_lock))) {
			*err = EOWNERDEAD;
			return NIL;
		}
		s = freelist_pop(base, h);
		if (s != NIL) {
			spin_unlock(&h->grow_lock);
			return s;
		}
		uint32_t c = 0;
		while (c < h->nchunks && __atomic_load_n(&h->chunks[c], __ATOMIC_ACQUIRE))
			c++;
		int e = c < h->nchunks ? carve_chunk(base, h, c, 1, dead) : E2BIG;
		spin_unlock(&h->grow_lock);
		if (e) {
			*err = e;
			return NIL;
		}
	}
}

/* key's bucket (*b, of *hash) locked, its element there (*slot, NIL: none) and the one
 * before it (*prev): 0, or the pid of a dead owner of the lock */
static int lock_key(MapObject *m, const uint8_t *k, uint32_t *hash, struct bucket **b,
		    uint32_t *slot, uint32_t *prev)
{
	*hash = htab_map_hash(k, m->key_size, m->hashrnd);
	*b = bucket_of(m, *hash);
	int dead = spin_lock(&(*b)->lock);
	if (!dead)
		*slot = find_in_bucket(m, *b, k, *hash, prev);
	return dead;
}

/* The share of the count of live elements this CPU keeps (see struct free_list) */
static inline void count_add(MapObject *m, int64_t delta)
{
	__atomic_add_fetch(&this_list(m->seg->base, map_hdr(m))->count, delta, __ATOMIC_RELAXED);
}

/* htab_lru_map_delete_node: the LRU's eviction of slot's element, unhashed if it is still in
 * its bucket (1), else 0 (a node being filled for an insert, or gone meanwhile) */
static int htab_lru_map_delete_node(MapObject *m, uint32_t slot, int *dead)
{
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	struct helem *e = (struct helem *)slot_elem(base, h, slot);
	struct bucket *b = bucket_of(m, __atomic_load_n(&e->hash, __ATOMIC_RELAXED));
	if ((*dead = spin_lock(&b->lock)))
		return 0;
	uint32_t prev = NIL, s = b->head;
	while (s != NIL && s != slot) {
		prev = s;
		s = ((struct helem *)slot_elem(base, h, s))->next;
	}
	if (s != NIL) {
		write_begin(&b->seq);
		unlink_slot(m, b, s, prev);
		write_end(&b->seq);
		count_add(m, -1);
	}
	spin_unlock(&b->lock);
	return s != NIL;
}

/* htab_lru_map_update_elem and __htab_lru_percpu_map_update_elem, on CPU lru_cpu: a node is
 * taken from the LRU before the bucket is locked (so an update that then fails on its flags
 * still evicted what it evicted), except for a per-CPU map's BPF_EXIST, which updates in
 * place; a replaced element, or the node unused, goes back after the bucket is unlocked */
static int lru_update(MapObject *m, const uint8_t *k, const uint8_t *v, uint64_t flags,
		      int64_t cpu, uint32_t lru_cpu, int *dead)
{
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	int percpu = is_percpu(m->type), err = 0;
	uint32_t node = NIL;
	if (!percpu || flags != BPF_EXIST) {
		node = lru_pop_free(m, lru_cpu, dead);
		if (node == NIL)
			return *dead ? EOWNERDEAD : ENOMEM;
	}
	uint32_t hash = htab_map_hash(k, m->key_size, m->hashrnd);
	struct helem *e = node == NIL ? NULL : (struct helem *)slot_elem(base, h, node);
	if (e && !percpu) { /* filled before the bucket is locked, as the kernel's */
		__atomic_store_n(&e->hash, hash, __ATOMIC_RELAXED);
		memcpy((uint8_t *)e + sizeof(*e), k, m->key_size);
		put_value(m, (uint8_t *)e + m->value_off, v, cpu, 1);
	}
	struct bucket *b = bucket_of(m, hash);
	uint32_t prev, old = NIL;
	if ((*dead = spin_lock(&b->lock))) {
		err = EOWNERDEAD;
		goto give_back;
	}
	old = find_in_bucket(m, b, k, hash, &prev);
	if (old != NIL && flags == BPF_NOEXIST)
		err = EEXIST;
	else if (old == NIL && flags == BPF_EXIST)
		err = ENOENT;
	if (err) {
		spin_unlock(&b->lock);
		goto give_back;
	}
	write_begin(&b->seq);
	if (old != NIL && percpu) {
		lru_set_ref(base, h, old);
		put_value(m, slot_elem(base, h, old) + m->value_off, v, cpu, 0);
		old = NIL;
	} else {
		if (percpu) {
			__atomic_store_n(&e->hash, hash, __ATOMIC_RELAXED);
			memcpy((uint8_t *)e + sizeof(*e), k, m->key_size);
			put_value(m, (uint8_t *)e + m->value_off, v, cpu, 1);
		}
		if (old != NIL) {
			lru_set_ref(base, h, node);
			unlink_slot(m, b, old, prev);
		} else {
			count_add(m, 1);
		}
		e->next = b->head;
		b->head = node;
		node = NIL;
	}
	write_end(&b->seq);
	spin_unlock(&b->lock);
give_back:
	if (node != NIL) {
		int d = lru_push_free(m, node);
		if (d && !err) {
			*dead = d;
			err = EOWNERDEAD;
		}
	}
	if (old != NIL && !err && (*dead = lru_push_free(m, old)))
		err = EOWNERDEAD;
	return err;
}

static int hash_update(MapObject *m, const uint8_t *k, const uint8_t *v, uint64_t flags,
		       int64_t cpu, uint32_t lru_cpu, int *dead)
{
	if (flags > BPF_EXIST) /* BPF_F_LOCK included: no spin lock in the value */
		return EINVAL;
	if (is_lru(m->type))
		return lru_update(m, k, v, flags, cpu, lru_cpu, dead);
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	uint32_t hash, prev, s;
	struct bucket *b;
	if ((*dead = lock_key(m, k, &hash, &b, &s, &prev)))
		return EOWNERDEAD;
	if (s != NIL && flags == BPF_NOEXIST) {
		spin_unlock(&b->lock);
		return EEXIST;
	}
	if (s == NIL && flags == BPF_EXIST) {
		spin_unlock(&b->lock);
		return ENOENT;
	}
	if (s != NIL) {
		/* The kernel links a new element at the bucket's front and frees the old one; the
		 * same order, without a spare element: rewrite it and move it to the front. A
		 * per-CPU map's element is updated in place (__htab_percpu_map_update_elem). */
		uint8_t *e = slot_elem(base, h, s);
		write_begin(&b->seq);
		put_value(m, e + m->value_off, v, cpu, 0);
		if (prev != NIL && !is_percpu(m->type)) {
			unlink_slot(m, b, s, prev);
			((struct helem *)e)->next = b->head;
			b->head = s;
		}
		write_end(&b->seq);
		spin_unlock(&b->lock);
		return 0;
	}
	int err = 0;
	s = alloc_slot(m, &err, dead);
	if (s == NIL) {
		spin_unlock(&b->lock);
		return err;
	}
	struct helem *e = (struct helem *)slot_elem(base, h, s);
	e->hash = hash;
	memcpy((uint8_t *)e + sizeof(*e), k, m->key_size);
	put_value(m, (uint8_t *)e + m->value_off, v, cpu, 1);
	e->next = b->head;
	write_begin(&b->seq); /* the element was unreachable until now: only the link counts */
	b->head = s;
	write_end(&b->seq);
	spin_unlock(&b->lock);
	return 0;
}

/* An unlinked element's slot given back, uncounted: to this CPU's free list, or an LRU
 * map's to its LRU. 0, or the pid of a dead owner of an LRU lock. */
static int free_slot(MapObject *m, uint32_t slot)
{
	if (!is_lru(m->type)) {
		freelist_push(m->seg->base, map_hdr(m), slot);
		return 0;
	}
	count_add(m, -1);
	return lru_push_free(m, slot);
}

/* Remove key's element; with out, copy its value there first. */
static int hash_delete(MapObject *m, const uint8_t *k, char *out, int *dead)
{
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	uint32_t hash, prev, s;
	struct bucket *b;
	if ((*dead = lock_key(m, k, &hash, &b, &s, &prev)))
		return EOWNERDEAD;
	if (s == NIL) {
		spin_unlock(&b->lock);
		return ENOENT;
	}
	if (out)
		memcpy(out, slot_elem(base, h, s) + m->value_off, m->data_size);
	write_begin(&b->seq);
	unlink_slot(m, b, s, prev);
	write_end(&b->seq);
	spin_unlock(&b->lock);
	return (*dead = free_slot(m, s)) ? EOWNERDEAD : 0;
}

/* The exception of a core's ``err`` (nonzero) on key ``k``: the kernel's errno, with what is
 * wrong and what to do. NULL. */
static PyObject *element_error(MapObject *m, int err, int dead, const uint8_t *k,
			       uint64_t flags)
{
	int array = is_array(m->type);
	if (is_lpm(m->type) && err != EOWNERDEAD && err != ENOMEM) {
		if (err == EINVAL && flags > BPF_EXIST)
			return os_error(EINVAL, "flags %#llx: use BPF_ANY, BPF_NOEXIST or BPF_EXIST",
					(unsigned long long)flags);
		if (err == EINVAL)
			return os_error(EINVAL, "prefixlen %u is over the trie's maximum %u",
					key_prefixlen(k), 8 * (m->key_size - 4));
		if (err == ENOSPC)
			return os_error(ENOSPC, "the trie is full (%u elements)", m->max_entries);
		if (err == EEXIST)
			return os_error(EEXIST, "an element with this prefix exists and BPF_NOEXIST "
					"was given");
		return os_error(ENOENT, flags == BPF_EXIST ? "no element with this prefix exists "
				"and BPF_EXIST was given" : "no element with exactly this prefix");
	}
	switch (err) {
	case EOWNERDEAD:
		return owner_dead(dead);
	case EINVAL:
		return os_error(EINVAL, "flags %#llx: use BPF_ANY, BPF_NOEXIST or BPF_EXIST",
				(unsigned long long)flags);
	case EEXIST:
		return os_error(EEXIST, array ? "array elements always exist (BPF_NOEXIST)"
				: "the key exists (BPF_NOEXIST)");
	case ENOENT:
		return os_error(ENOENT, flags == BPF_EXIST ? "the key does not exist (BPF_EXIST)"
				: "key not found");
	case E2BIG:
		if (array)
			return os_error(E2BIG, "index %u is past the array's end (max_entries %u): "
					"raise max_entries", array_index(k), m->max_entries);
		return os_error(E2BIG, "the map is full (max_entries %u): delete elements or "
				"create it with a larger max_entries", m->max_entries);
	default:
		return os_error(ENOMEM, "the segment is full: no room for more elements of this "
				"BPF_F_NO_PREALLOC map; create the segment with a larger size");
	}
}

static PyObject *Map_update_impl(MapObject *m, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs < 2 || nargs > 5) {
		PyErr_SetString(PyExc_TypeError, "update(key, value, flags=0, cpu=-1, lru_cpu=-1)");
		return NULL;
	}
	const uint8_t *k;
	if (get_key(m, args[0], &k) < 0)
		return NULL;
	PyObject *value = args[1];
	if (!PyBytes_CheckExact(value)) {
		PyErr_Format(PyExc_TypeError, "a value is bytes, got %.100s",
			     Py_TYPE(value)->tp_name);
		return NULL;
	}
	uint64_t flags = 0;
	long long cpu = -1;
	if (nargs >= 3) {
		flags = PyLong_AsUnsignedLongLong(args[2]);
		if (flags == (uint64_t)-1 && PyErr_Occurred())
			return NULL;
	}
	if (nargs >= 4 && (cpu = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred())
		return NULL;
	long long lru_cpu = nargs == 5 ? PyLong_AsLongLong(args[4]) : -1;
	if (lru_cpu == -1 && PyErr_Occurred())
		return NULL;
	if (lru_cpu == -1 && is_lru(m->type)) { /* the CPU this process runs on */
		int host = cpu != -1 ? (int)cpu : sched_getcpu();
		lru_cpu = host < 0 ? 0 : (uint32_t)host % map_hdr(m)->lru_cpus;
	}
	if (is_lru(m->type) && (lru_cpu < 0 || lru_cpu >= map_hdr(m)->lru_cpus))
		return os_error(EINVAL, "lru_cpu %lld: an LRU map's update runs on one of its %u "
				"CPUs", lru_cpu, map_hdr(m)->lru_cpus);
	if (cpu != -1 && (!is_percpu(m->type) || cpu < 0 || cpu >= m->ncpus))
		return os_error(EINVAL, "cpu %lld: a program's update of one CPU's value is for a "
				"per-CPU map, with a CPU below its %u", cpu, m->ncpus);
	if (flags & BPF_F_LOCK) /* syscall.c: BPF_F_LOCK needs a bpf_spin_lock in the value */
		return os_error(EINVAL, "BPF_F_LOCK needs a bpf_spin_lock in the value (shared maps "
				"have none)");
	uint32_t size = cpu == -1 ? m->data_size : m->value_size;
	if ((size_t)PyBytes_GET_SIZE(value) != size)
		return os_error(EINVAL, "the value has %zd bytes, the map's takes %u%s",
				PyBytes_GET_SIZE(value), size, size == m->value_size ? ""
				: " (value_size rounded up to 8, for each CPU)");
	const uint8_t *v = (const uint8_t *)PyBytes_AS_STRING(value);
	int dead = 0;
	int err = is_array(m->type) ? array_update(m, k, v, flags, cpu, &dead)
		: is_lpm(m->type) ? lpm_update(m, k, v, flags, &dead)
		: hash_update(m, k, v, flags, cpu, (uint32_t)lru_cpu, &dead);
	if (err)
		return element_error(m, err, dead, k, flags);
	Py_RETURN_NONE;
}

static PyObject *Map_delete_impl(MapObject *m, PyObject *key)
{
	const uint8_t *k;
	if (get_key(m, key, &k) < 0)
		return NULL;
	if (is_array(m->type))
		return os_error(EINVAL, "array elements cannot be deleted (they always exist); "
				"write zeros instead");
	int dead = 0;
	int err = is_lpm(m->type) ? lpm_delete(m, k, &dead) : hash_delete(m, k, NULL, &dead);
	if (err)
		return element_error(m, err, dead, k, 0);
	Py_RETURN_NONE;
}

/* lookup_and_delete(key) -> bytes (flags were checked by the face: any is EINVAL here) */
static PyObject *Map_lookup_and_delete_impl(MapObject *m, PyObject *key)
{
	const uint8_t *k;
	if (get_key(m, key, &k) < 0)
		return NULL;
	if (is_array(m->type) || is_lpm(m->type))
		return os_error(ENOTSUPP, "lookup_and_delete is not supported by this map type");
	PyObject *out = PyBytes_FromStringAndSize(NULL, m->data_size);
	if (!out)
		return NULL;
	int dead = 0;
	int err = hash_delete(m, k, PyBytes_AS_STRING(out), &dead);
	if (err) {
		Py_DECREF(out);
		return element_error(m, err, dead, k, 0);
	}
	return out;
}

/* get_next_key(key or None) -> bytes: the kernel's order; ENOENT at the end */
static PyObject *Map_get_next_key_impl(MapObject *m, PyObject *key)
{
	const uint8_t *k = NULL;
	if (key != Py_None && get_key(m, key, &k) < 0)
		return NULL;
	if (m->seg->base == NULL)
		return os_error(EBADF, "the map's segment is closed");
	if (is_array(m->type)) {
		uint32_t index = UINT32_MAX;
		if (k)
			index = array_index(k);
		if (index >= m->max_entries)
			index = 0;
		else if (index == m->max_entries - 1)
			return os_error(ENOENT, "index %u is the last one (max_entries %u)", index,
					m->max_entries);
		else
			index++;
		return PyBytes_FromStringAndSize((const char *)&index, 4);
	}
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	uint32_t i = 0;
	int dead;
	if (is_lpm(m->type)) {
		PyObject *out = PyBytes_FromStringAndSize(NULL, m->key_size);
		if (!out)
			return NULL;
		uint8_t *next = (uint8_t *)PyBytes_AS_STRING(out);
		struct bucket *t = trie_of(m);
		uint32_t start, s;
		int empty;
		do {
			if ((dead = read_begin(&t->seq, &t->lock, &start))) {
				Py_DECREF(out);
				return owner_dead(dead);
			}
			s = lpm_next(m, k, &empty);
			if (s != NIL) {
				struct lpm_node *n = lpm_node(m, s);
				memcpy(next, &n->prefixlen, 4);
				memcpy(next + 4, node_data(n), m->key_size - 4);
			}
		} while (read_retry(&t->seq, start));
		if (s == NIL) {
			Py_DECREF(out);
			return os_error(ENOENT, empty ? "the trie is empty"
					: "the key is the last one in the trie's order");
		}
		return out;
	}
	if (k) {
		uint32_t hash = htab_map_hash(k, m->key_size, m->hashrnd);
		struct bucket *b = bucket_of(m, hash);
		if ((dead = spin_lock(&b->lock)))
			return owner_dead(dead);
		uint32_t s = find_in_bucket(m, b, k, hash, NULL);
		if (s != NIL) {
			uint32_t next = ((struct helem *)slot_elem(base, h, s))->next;
			if (next != NIL) {
				PyObject *r = PyBytes_FromStringAndSize(
					(const char *)slot_elem(base, h, next) + sizeof(struct helem),
					m->key_size);
				spin_unlock(&b->lock);
				return r;
			}
			i = (hash & m->mask) + 1;
		}
		spin_unlock(&b->lock);
	}
	struct bucket *buckets = (struct bucket *)(base + h->buckets_off);
	for (; i <= m->mask; i++) {
		struct bucket *b = &buckets[i];
		if (__atomic_load_n(&b->head, __ATOMIC_RELAXED) == NIL)
			continue;
		if ((dead = spin_lock(&b->lock)))
			return owner_dead(dead);
		if (b->head != NIL) {
			PyObject *r = PyBytes_FromStringAndSize(
				(const char *)slot_elem(base, h, b->head) + sizeof(struct helem),
				m->key_size);
			spin_unlock(&b->lock);
			return r;
		}
		spin_unlock(&b->lock);
	}
	return os_error(ENOENT, "no next key");
}

/* check() -> [problem, ...]: a hash map's structure at rest (no operation in flight), as the
 * reference's check_invariants: every chain's elements in their bucket, once; the count; the
 * free slots (each once, none hashed) and the hashed ones make up every slot carved; an LRU
 * map's lists (lru_problems). [] for an array. */
static PyObject *Map_check_impl(MapObject *m)
{
	if (m->seg->base == NULL)
		return os_error(EBADF, "the map's segment is closed");
	PyObject *problems = PyList_New(0);
	if (!problems || is_array(m->type))
		return problems;
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	uint32_t carved = 0;
	for (uint32_t c = 0; c < h->nchunks; c++)
		if (__atomic_load_n(&h->chunks[c], __ATOMIC_ACQUIRE))
			carved += c == h->nchunks - 1 ? m->capacity - (c << h->chunk_shift)
				: 1u << h->chunk_shift;
	if (is_lpm(m->type)) {
		if (lpm_problems(m, carved, problems) < 0)
			Py_CLEAR(problems);
		return problems;
	}
	uint8_t *seen = calloc(m->max_entries, 1);
	if (!seen) {
		Py_DECREF(problems);
		return PyErr_NoMemory();
	}
	struct bucket *buckets = (struct bucket *)(base + h->buckets_off);
	uint32_t elements = 0, free_slots = 0;
	int rc = 0;
	for (uint32_t i = 0; i <= m->mask && rc == 0; i++)
		for (uint32_t s = buckets[i].head; s != NIL && rc == 0;
		     s = ((struct helem *)slot_elem(base, h, s))->next) {
			if (s >= m->max_entries || seen[s]++) {
				rc = add_problem(problems, "bucket %u: slot %u twice or out of range",
						 i, s);
				break;
			}
			elements++;
			if ((((struct helem *)slot_elem(base, h, s))->hash & m->mask) != i)
				rc = add_problem(problems, "bucket %u: slot %u hashes elsewhere", i, s);
		}
	struct free_list *lists = free_lists(base, h);
	int64_t count = 0;
	for (int i = 0; i < FREE_LISTS && rc == 0; i++) {
		count += lists[i].count;
		for (uint32_t s = (uint32_t)lists[i].head; s != NIL && rc == 0;
		     s = ((struct helem *)slot_elem(base, h, s))->next) {
			if (s >= m->max_entries || seen[s]++) {
				rc = add_problem(problems, "free list %d: slot %u hashed, listed twice "
						 "or out of range", i, s);
				break;
			}
			free_slots++;
		}
	}
	free(seen);
	if (rc == 0 && count != elements)
		rc = add_problem(problems, "element count %lld but %u elements", (long long)count,
				 elements);
	if (rc == 0 && !is_lru(m->type) && free_slots + elements != carved)
		rc = add_problem(problems, "%u free + %u hashed slots, but %u carved", free_slots,
				 elements, carved);
	if (rc == 0 && is_lru(m->type))
		rc = lru_problems(m, elements, problems);
	if (rc < 0) {
		Py_DECREF(problems);
		return NULL;
	}
	return problems;
}

static PyObject *Map_check(MapObject *m, PyObject *unused)
{
	return map_result(m, "map_check", Map_check_impl(m));
}

/* bucket_batch(start, room, delete) -> (index, items): a hash map's batch ops' step
 * (__htab_map_lookup_and_delete_batch): the first bucket at or after ``start`` that holds
 * elements (index n_buckets when none does), and its (key, value) pairs front to back, read
 * under its lock; None for the pairs when it holds more than ``room`` (nothing taken). With
 * ``delete`` the bucket is emptied, its elements freed once its lock is dropped (an LRU
 * map's back to the LRU), as the kernel frees them. */
static PyObject *Map_bucket_batch_impl(MapObject *m, PyObject *args)
{
	unsigned int start, room;
	int delete;
	if (!PyArg_ParseTuple(args, "IIp", &start, &room, &delete))
		return NULL;
	if (m->seg->base == NULL)
		return os_error(EBADF, "the map's segment is closed");
	if (is_array(m->type) || is_lpm(m->type))
		return os_error(ENOTSUPP, "bucket batches are a hash map's");
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	struct bucket *buckets = (struct bucket *)(base + h->buckets_off);
	uint32_t i = start;
	for (; i <= m->mask; i++) {
		struct bucket *b = &buckets[i];
		if (__atomic_load_n(&b->head, __ATOMIC_RELAXED) == NIL)
			continue;
		int dead = spin_lock(&b->lock);
		if (dead)
			return owner_dead(dead);
		uint32_t n = 0;
		for (uint32_t s = b->head; s != NIL; s = ((struct helem *)slot_elem(base, h, s))->next)
			n++;
		if (n == 0) {
			spin_unlock(&b->lock);
			continue;
		}
		if (n > room) {
			spin_unlock(&b->lock);
			return Py_BuildValue("IO", i, Py_None);
		}
		PyObject *items = PyList_New(n);
		uint32_t *freed = delete ? PyMem_Malloc(n * sizeof(uint32_t)) : NULL;
		if (!items || (delete && !freed)) {
			spin_unlock(&b->lock);
			Py_XDECREF(items);
			PyMem_Free(freed);
			return PyErr_NoMemory();
		}
		uint32_t k = 0;
		for (uint32_t s = b->head; s != NIL; s = ((struct helem *)slot_elem(base, h, s))->next) {
			uint8_t *e = slot_elem(base, h, s);
			PyObject *pair = Py_BuildValue(
				"y#y#", (const char *)e + sizeof(struct helem), (Py_ssize_t)m->key_size,
				(const char *)e + m->value_off, (Py_ssize_t)m->data_size);
			if (!pair) {
				spin_unlock(&b->lock);
				Py_DECREF(items);
				PyMem_Free(freed);
				return NULL;
			}
			PyList_SET_ITEM(items, k, pair);
			if (freed)
				freed[k] = s;
			k++;
		}
		if (delete) {
			write_begin(&b->seq);
			b->head = NIL;
			write_end(&b->seq);
		}
		spin_unlock(&b->lock);
		for (uint32_t j = 0; delete && j < n; j++) {
			if ((dead = free_slot(m, freed[j]))) {
				PyMem_Free(freed);
				Py_DECREF(items);
				return owner_dead(dead);
			}
		}
		PyMem_Free(freed);
		return Py_BuildValue("IN", i, items);
	}
	PyObject *none_left = PyList_New(0);
	return none_left == NULL ? NULL : Py_BuildValue("IN", m->mask + 1, none_left);
}

static PyObject *Map_bucket_batch(MapObject *m, PyObject *args)
{
	return map_result(m, "map_lookup_batch", Map_bucket_batch_impl(m, args));
}

static PyObject *Map_get_count_impl(MapObject *m)
{
	if (m->seg->base == NULL)
		return os_error(EBADF, "the map's segment is closed");
	if (is_array(m->type))
		return PyLong_FromUnsignedLong(m->max_entries);
	struct free_list *lists = free_lists(m->seg->base, map_hdr(m));
	int64_t count = 0;
	for (int i = 0; i < FREE_LISTS; i++)
		count += __atomic_load_n(&lists[i].count, __ATOMIC_RELAXED);
	return PyLong_FromLongLong(count);
}

static PyObject *Map_get_count(MapObject *m, void *unused)
{
	return map_result(m, "map_count", Map_get_count_impl(m));
}

static PyObject *Map_lookup(MapObject *m, PyObject *key)
{
	return map_result(m, "map_lookup_elem", Map_lookup_impl(m, key));
}

static PyObject *Map_value_offset(MapObject *m, PyObject *key)
{
	return map_result(m, "map_lookup_elem", Map_value_offset_impl(m, key));
}

static PyObject *Map_delete(MapObject *m, PyObject *key)
{
	return map_result(m, "map_delete_elem", Map_delete_impl(m, key));
}

static PyObject *Map_lookup_and_delete(MapObject *m, PyObject *key)
{
	return map_result(m, "map_lookup_and_delete_elem", Map_lookup_and_delete_impl(m, key));
}

static PyObject *Map_get_next_key(MapObject *m, PyObject *key)
{
	return map_result(m, "map_get_next_key", Map_get_next_key_impl(m, key));
}

static PyObject *Map_update(MapObject *m, PyObject *const *args, Py_ssize_t nargs)
{
	return map_result(m, "map_update_elem", Map_update_impl(m, args, nargs));
}

static PyMethodDef Map_methods[] = {
	{"lookup", (PyCFunction)Map_lookup, METH_O, "lookup(key) -> value bytes"},
	{"update", (PyCFunction)(void (*)(void))Map_update, METH_FASTCALL,
	 "update(key, value, flags=0, cpu=-1, lru_cpu=-1): cpu, a program's update of that "
	 "CPU's value of a per-CPU map (-1: a syscall's, every CPU's); lru_cpu, the CPU whose "
	 "LRU lists an LRU map's insert takes a node from (-1: cpu, else the host CPU this "
	 "process runs on, modulo the map's CPUs)"},
	{"value_offset", (PyCFunction)Map_value_offset, METH_O,
	 "value_offset(key) -> where the live value lies in the segment, or -1"},
	{"delete", (PyCFunction)Map_delete, METH_O, "delete(key)"},
	{"lookup_and_delete", (PyCFunction)Map_lookup_and_delete, METH_O,
	 "lookup_and_delete(key) -> value bytes"},
	{"get_next_key", (PyCFunction)Map_get_next_key, METH_O, "get_next_key(key or None)"},
	{"bucket_batch", (PyCFunction)Map_bucket_batch, METH_VARARGS,
	 "bucket_batch(start, room, delete) -> (index, [(key, value), ...] or None): a hash "
	 "map's batch step, a whole bucket"},
	{"check", (PyCFunction)Map_check, METH_NOARGS,
	 "check() -> [problem, ...]: a hash map's chains, count, free slots and LRU lists at "
	 "rest ([] when consistent)"},
	{"_set_errors", (PyCFunction)Map_set_errors, METH_O,
	 "_set_errors(factory): element errors become factory(errno, command, detail)"},
	{NULL}};

static PyMemberDef Map_members[] = {
	{"name", T_OBJECT, offsetof(MapObject, name), READONLY, "name in the segment"},
	{"type", T_UINT, offsetof(MapObject, type), READONLY, "BPF_MAP_TYPE_*"},
	{"key_size", T_UINT, offsetof(MapObject, key_size), READONLY, NULL},
	{"value_size", T_UINT, offsetof(MapObject, value_size), READONLY, NULL},
	{"max_entries", T_UINT, offsetof(MapObject, max_entries), READONLY, NULL},
	{"map_flags", T_UINT, offsetof(MapObject, map_flags), READONLY, NULL},
	{"hashrnd", T_UINT, offsetof(MapObject, hashrnd), READONLY, NULL},
	{"segment", T_OBJECT, offsetof(MapObject, seg), READONLY, NULL},
	{"offset", T_ULONGLONG, offsetof(MapObject, off), READONLY,
	 "where the map's header is in the segment: the same map under any name"},
	{"ncpus", T_UINT, offsetof(MapObject, ncpus), READONLY,
	 "a per-CPU map's CPUs (1 for the others)"},
	{NULL}};

static PyObject *Map_get_lru_cpus(MapObject *m, void *unused)
{
	if (m->seg->base == NULL)
		return os_error(EBADF, "the map's segment is closed");
	return PyLong_FromUnsignedLong(is_lru(m->type) ? map_hdr(m)->lru_cpus : 0);
}

static PyGetSetDef Map_getset[] = {
	{"count", (getter)Map_get_count, NULL,
	 "live elements of a hash (max_entries for an array)", NULL},
	{"lru_cpus", (getter)Map_get_lru_cpus, NULL,
	 "an LRU map's CPUs (each with its lists), 0 for the others", NULL},
	{NULL}};

static PyTypeObject MapType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pybpf._shm_maps.Map",
	.tp_basicsize = sizeof(MapObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "a map in a shared segment (made by Segment.create_map / open_map)",
	.tp_dealloc = (destructor)Map_dealloc,
	.tp_methods = Map_methods,
	.tp_members = Map_members,
	.tp_getset = Map_getset,
};

/* -- the native tier's calls ---------------------------------------------------------------- */

/* What the native tier (emulated/prog/native.py) calls from machine code on a map of a
 * segment, with the key (and value) where the program holds them: no GIL, no Python object.
 * ``map`` is the Map object, which the emulated map keeps alive. SHM_NATIVE_SLOW: not done
 * here (a closed segment, a lock whose owner died): the helper through Python, which says
 * why. */
#define SHM_NATIVE_SLOW UINT64_MAX

/* bpf_map_lookup_elem: 1 + where the live value lies from the segment's start (a per-CPU
 * map's: CPU 0's slot), 0 when absent */
uint64_t pybpf_shm_lookup(PyObject *map, const uint8_t *key)
{
	MapObject *m = (MapObject *)map;
	uint8_t *base = m->seg->base;
	if (base == NULL)
		return SHM_NATIVE_SLOW;
	if (is_array(m->type)) {
		uint32_t index = array_index(key);
		return index >= m->max_entries ? 0
			: 1 + (uint64_t)((uint8_t *)array_elem(m, index) + m->value_off - base);
	}
	uint32_t hash = is_lpm(m->type) ? 0 : htab_map_hash(key, m->key_size, m->hashrnd);
	struct bucket *b = is_lpm(m->type) ? trie_of(m) : bucket_of(m, hash);
	uint32_t start, s;
	do {
		if (read_begin(&b->seq, &b->lock, &start))
			return SHM_NATIVE_SLOW;
		s = is_lpm(m->type) ? lpm_walk(m, key) : walk_chain(m, b, key, hash);
	} while (read_retry(&b->seq, start));
	if (s == NIL)
		return 0;
	if (is_lru(m->type))
		lru_set_ref(base, map_hdr(m), s);
	return 1 + (uint64_t)(slot_elem(base, map_hdr(m), s) + m->value_off - base);
}

/* bpf_map_update_elem (op 1) or bpf_map_delete_elem (op 2) from a program on CPU ``cpu``
 * (a per-CPU map's update writes its slot): 0 or -errno as the helper returns it */
uint64_t pybpf_shm_op(PyObject *map, int64_t op, const uint8_t *key, const uint8_t *value,
		      uint64_t flags, int64_t cpu)
{
	MapObject *m = (MapObject *)map;
	int dead = 0, err;
	if (m->seg->base == NULL || (is_percpu(m->type) && (cpu < 0 || cpu >= m->ncpus)) ||
	    (is_lru(m->type) && (cpu < 0 || cpu >= map_hdr(m)->lru_cpus)))
		return SHM_NATIVE_SLOW;
	uint32_t lru_cpu = (uint32_t)cpu;
	cpu = is_percpu(m->type) ? cpu : -1;
	if (op == 1)
		err = flags & BPF_F_LOCK ? EINVAL /* no bpf_spin_lock in the value */
			: is_array(m->type) ? array_update(m, key, value, flags, cpu, &dead)
			: is_lpm(m->type) ? lpm_update(m, key, value, flags, &dead)
			: hash_update(m, key, value, flags, cpu, lru_cpu, &dead);
	else
		err = is_array(m->type) ? EINVAL : is_lpm(m->type) ? lpm_delete(m, key, &dead)
			: hash_delete(m, key, NULL, &dead);
	if (err == EOWNERDEAD)
		return SHM_NATIVE_SLOW;
	return -(uint64_t)err;
}

/* The Map of the map that the map pointer ``r1`` points to among the run's regions ``mem``
 * (a map a program found at run time, in a map of maps), its key and value sizes in sizes[0]
 * and sizes[1], where that map is a segment's (its ``shm``); else NULL (the helper through
 * Python, which says what is wrong). Borrowed: the map, which the run's regions hold, keeps
 * it. The GIL is taken. */
PyObject *pybpf_shm_map_of(PyObject *mem, uint64_t r1, int64_t *sizes)
{
	if (r1 & 0xffffffffu)
		return NULL;
	static PyObject *shm_name;  /* "shm", interned once: a name made at each call cost more
				     * than the lookup */
	static IntCacheSlot regions[INT_CACHE_SLOTS];  /* R1's region: the same at every run */
	HelperGil gil = helper_gil_take();
	if (shm_name == NULL)
		shm_name = PyUnicode_InternFromString("shm");
	PyObject *region = cached_int(regions, r1 >> 32), *found = NULL;
	PyObject *obj = region == NULL ? NULL : PyDict_GetItemWithError(mem, region); /* borrowed */
	if (obj != NULL && shm_name != NULL && (found = own_attr(obj, shm_name)) != NULL &&
	    Py_IS_TYPE(found, &MapType)) {
		sizes[0] = ((MapObject *)found)->key_size;
		sizes[1] = ((MapObject *)found)->value_size;
	} else {
		Py_CLEAR(found);
	}
	PyErr_Clear();
	Py_XDECREF(region);
	Py_XDECREF(found);
	helper_gil_give(gil);
	return found;
}

/* -- module ------------------------------------------------------------------------------- */

static PyObject *py_htab_map_hash(PyObject *module, PyObject *args)
{
	Py_buffer key;
	unsigned int hashrnd;
	if (!PyArg_ParseTuple(args, "y*I", &key, &hashrnd))
		return NULL;
	uint32_t h = htab_map_hash(key.buf, (uint32_t)key.len, hashrnd);
	PyBuffer_Release(&key);
	return PyLong_FromUnsignedLong(h);
}

static PyObject *py_jhash(PyObject *module, PyObject *args)
{
	Py_buffer key;
	unsigned int initval;
	if (!PyArg_ParseTuple(args, "y*I", &key, &initval))
		return NULL;
	uint32_t h = jhash(key.buf, (uint32_t)key.len, initval);
	PyBuffer_Release(&key);
	return PyLong_FromUnsignedLong(h);
}

static PyObject *py_waits(PyObject *module, PyObject *unused)
{
	return Py_BuildValue("KK", (unsigned long long)__atomic_load_n(&lock_waits, __ATOMIC_RELAXED),
			     (unsigned long long)__atomic_load_n(&read_waits, __ATOMIC_RELAXED));
}

/* lock_trace(capacity) -> (bytes, lost, read_ns): the trace so far (struct lock_hold records,
 * u64 triples, the oldest first; a hold not let go yet ends at 0), the count of older holds
 * written over and what a clock read cost as it began, ended; a new one begun that keeps the
 * last ``capacity`` holds (0: none) */
static PyObject *py_lock_trace(PyObject *module, PyObject *arg)
{
	Py_ssize_t capacity = PyLong_AsSsize_t(arg);
	if (capacity < 0) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "lock_trace(capacity): capacity >= 0");
		return NULL;
	}
	if (holds != NULL && !pthread_equal(trace_thread, pthread_self())) {
		/* that thread records into the ring as this one would swap it */
		PyErr_SetString(PyExc_RuntimeError, "lock_trace: another thread of this process "
				"is recording: end its trace from that thread");
		return NULL;
	}
	if ((size_t)capacity > SIZE_MAX / sizeof(struct lock_hold))
		return PyErr_NoMemory();
	struct lock_hold *fresh = NULL;
	if (capacity && (fresh = PyMem_RawCalloc((size_t)capacity, sizeof *fresh)) == NULL)
		return PyErr_NoMemory();
	/* the ring from its oldest hold */
	size_t kept = holds_made < holds_cap ? holds_made : holds_cap;
	size_t oldest = holds_made <= holds_cap ? 0 : holds_made % holds_cap;
	PyObject *raw = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(kept * sizeof *holds));
	if (raw != NULL && kept) {
		char *out = PyBytes_AS_STRING(raw);
		memcpy(out, holds + oldest, (kept - oldest) * sizeof *holds);
		memcpy(out + (kept - oldest) * sizeof *holds, holds, oldest * sizeof *holds);
	}
	PyObject *trace = raw == NULL ? NULL : Py_BuildValue(
		"(Nnd)", raw, (Py_ssize_t)(holds_made - kept), clock_read_ns);
	if (trace == NULL) {
		PyMem_RawFree(fresh);
		return NULL;
	}
	if (fresh != NULL) {  /* the cost of the two reads each hold adds */
		enum { READS = 4096 };
		uint64_t start = monotonic_ns();
		for (int i = 0; i < READS; i++)
			(void)monotonic_ns();
		clock_read_ns = (double)(monotonic_ns() - start) / (READS + 1);
	}
	PyMem_RawFree(holds);
	/* the ring last: no other thread records into it meanwhile (none is the trace's) */
	trace_thread = pthread_self();
	holds_cap = (size_t)capacity;
	holds_made = 0;
	n_open = 0;
	__atomic_store_n(&holds, fresh, __ATOMIC_RELEASE);
	return trace;
}

/* handoff(buffer, rounds, me) -> ns: ``rounds`` passes of the first word of ``buffer`` (a
 * writable buffer two processes share, an anonymous shared mmap) between this process, ``me``
 * (0 or 1), and the other: each waits for the word to say it is its turn, then hands the
 * turn over. The wall-clock ns it took, in which the word's cache line moved 2 * rounds
 * times between the two processes' CPUs. */
#define HANDOFF_TIMEOUT_NS 10000000000ULL

static PyObject *py_handoff(PyObject *module, PyObject *args)
{
	Py_buffer buf;
	long long rounds;
	int me;
	if (!PyArg_ParseTuple(args, "w*Li", &buf, &rounds, &me))
		return NULL;
	if (buf.len < 64 || ((uintptr_t)buf.buf & 63) || rounds < 1 || (me != 0 && me != 1)) {
		PyBuffer_Release(&buf);
		PyErr_SetString(PyExc_ValueError, "handoff(buffer, rounds, me): a 64-byte aligned "
				"buffer of 64 bytes or more, rounds >= 1, me 0 or 1");
		return NULL;
	}
	uint32_t *turn = buf.buf;
	uint64_t start = monotonic_ns();
	int gone = 0;
	Py_BEGIN_ALLOW_THREADS
	for (long long i = 0; i < rounds && !gone; i++) {
		unsigned long spins = 0;
		while (!gone && __atomic_load_n(turn, __ATOMIC_ACQUIRE) != (uint32_t)me)
			if (++spins % 4096 == 0) {
				sched_yield();  /* the other is not running: give it the CPU */
				gone = monotonic_ns() - start > HANDOFF_TIMEOUT_NS;
			} else {
				cpu_relax();
			}
		__atomic_store_n(turn, (uint32_t)(1 - me), __ATOMIC_RELEASE);
	}
	Py_END_ALLOW_THREADS
	uint64_t took = monotonic_ns() - start;
	PyBuffer_Release(&buf);
	if (gone) {
		PyErr_SetString(PyExc_TimeoutError, "handoff: the other process passed nothing back "
				"for 10 s (did it start, on another CPU?)");
		return NULL;
	}
	return PyLong_FromUnsignedLongLong(took);
}

static PyMethodDef module_methods[] = {
	{"handoff", py_handoff, METH_VARARGS,
	 "handoff(buffer, rounds, me) -> ns: rounds passes of a shared buffer's first word "
	 "between this process (me, 0 or 1) and another; the wall-clock ns they took"},
	{"lock_trace", py_lock_trace, METH_O,
	 "lock_trace(capacity) -> (bytes, lost, read_ns): the holds of segment locks this thread "
	 "recorded (u64 triples, oldest first: the lock's address, the CLOCK_MONOTONIC ns it was "
	 "taken and let go), how many older ones were written over, and the ns a clock read "
	 "cost; a new trace begun that keeps the last capacity holds (0: tracing off)"},
	{"waits", py_waits, METH_NOARGS,
	 "waits() -> (lock_waits, read_waits): how often this process found a segment lock held "
	 "by another, and a lookup read again as a writer changed what it read"},
	{"htab_map_hash", py_htab_map_hash, METH_VARARGS,
	 "htab_map_hash(key, hashrnd): the bucket hash of a key (jhash2 or jhash)"},
	{"jhash", py_jhash, METH_VARARGS, "jhash(bytes, initval)"},
	{"unlink", shm_unlink_name, METH_O, "unlink(name): remove a named segment"},
	{NULL}};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT, "pybpf._shm_maps",
	"BPF array and hash maps in a shared memory segment (see pybpf.shared)", -1,
	module_methods};

PyMODINIT_FUNC PyInit__shm_maps(void)
{
	refresh_pid();
	pthread_atfork(NULL, NULL, refresh_pid);
	if (PyType_Ready(&SegmentType) < 0 || PyType_Ready(&MapType) < 0)
		return NULL;
	PyObject *m = PyModule_Create(&module_def);
	if (!m)
		return NULL;
	Py_INCREF(&SegmentType);
	Py_INCREF(&MapType);
	if (PyModule_AddObject(m, "Segment", (PyObject *)&SegmentType) < 0 ||
	    PyModule_AddObject(m, "Map", (PyObject *)&MapType) < 0 ||
	    PyModule_AddIntConstant(m, "MAX_MAPS", MAX_MAPS) < 0 ||
	    PyModule_AddIntConstant(m, "MAX_PIDS", MAX_PIDS) < 0 ||
	    PyModule_AddIntConstant(m, "MAP_NAME_LEN", MAP_NAME_LEN) < 0 ||
	    PyModule_AddIntConstant(m, "HEADER_SIZE", (long)sizeof(struct seg_hdr)) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
