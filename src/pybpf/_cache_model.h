/*
 * What the sources of pybpf._cache_model share: the cache model's calls (_cache_model.c)
 * that the hash map's hot path (_hashtab.c) and its allocator (_memalloc.c) make, each the
 * twin of a Timing method, and a few small steps of theirs.
 *
 * Where a model is passed as a PyObject *, NULL is a machine without modeled time
 * (UnmodeledTiming): charge_n, write_line, model_unlock and the lists' locks then do nothing,
 * as that class's methods do.
 */
#ifndef PYBPF_CACHE_MODEL_H
#define PYBPF_CACHE_MODEL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include "_helper_gil.h"
#include "_pyattr.h"

typedef struct CacheModel CacheModel;

extern PyTypeObject CacheModelType;

/* *name, the interned string of text: 0, or -1 with an exception */
int intern(PyObject **name, const char *text);
/* Timing.access: the stall in ns (charged), or -1.0 with an exception set */
double model_access(CacheModel *m, int cpu, uint64_t addr, int write);
int parse_cpu(CacheModel *m, PyObject *obj, int *cpu);
int parse_addr(PyObject *obj, uint64_t *addr);
/* Timing.charge(cpu, event, n) */
int charge_n(PyObject *model, PyObject *cpu, PyObject *event, PyObject *n);
/* Timing.spin_lock, spin_unlock, locked_access, called as the methods are */
PyObject *cm_spin_lock(PyObject *op, PyObject *const *args, Py_ssize_t nargs);
PyObject *cm_spin_unlock(PyObject *op, PyObject *const *args, Py_ssize_t nargs);
PyObject *cm_locked_access(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
			   PyObject *kwnames);
/* A map core's Timing, with what Timing.sync reads at every operation bound once: the
 * instance dict that holds its ``_scheduler`` (Timing.scheduler's), and ``_deferred``, its list
 * of a heap of deferred work per CPU (neither is ever rebound) */
typedef struct {
	PyObject *timing;
	PyObject *dict;
	PyObject *deferred;
} TimingRef;
/* Bind ``t`` to the map's timing (bpf_map.timing): 0, or -1 with an exception */
int timing_ref_bind(TimingRef *t, PyObject *bpf_map);
#define TIMING_REF_VISIT(t) do { Py_VISIT((t).timing); Py_VISIT((t).dict); \
				 Py_VISIT((t).deferred); } while (0)
#define TIMING_REF_CLEAR(t) do { Py_CLEAR((t).timing); Py_CLEAR((t).dict); \
				 Py_CLEAR((t).deferred); } while (0)
/* Timing.sync(cpu) (its scheduler's turn, then the CPU's deferred work that is due); m may
 * be NULL (no modeled time) */
int timing_sync(const TimingRef *t, CacheModel *m, PyObject *cpu_obj, int cpu);
/* HtabMap._walk_cost's accesses: the bucket's line, then its chain up to the key */
int htab_chain_cost(CacheModel *m, int cpu, uint64_t bucket, PyObject *chain, PyObject *kb);

/* The error being raised kept as the native tier's run's ``error`` (the run stops and raises
 * it), cleared here */
void native_keep_error(PyObject *run);

/* _hashtab.c: HtabCore, the hash map's update and delete in C */
extern PyTypeObject HtabCoreType;
extern PyTypeObject OpsHelpersType;
/* The native tier's lookup of the key bytes at ``key`` charged on the core's map (its key
 * bytes in *kb): 0, or -1 */
int htab_core_lookup_cost(PyObject *core, PyObject *cpu_obj, int cpu, const char *key,
			  PyObject **kb);
int htab_core_ready(void);
/* An LRU's del_from_htab(node) on the CPU evicting: an HtabCore's delete_node is called
 * directly with that CPU (not the thread's, read again), any other callable as it is */
PyObject *htab_evict_node(PyObject *del_from_htab, PyObject *node, PyObject *cpu_obj, int cpu);
/* An HtabElem's fields: elem.name read (a new reference) and written, at the slot's offset
 * where elem is one, else by attribute; the fields from ELEM_PREV on are its LruNode's,
 * which an LRU list's head (_Head) has too */
enum { ELEM_KEY, ELEM_VALUE, ELEM_HASH, ELEM_NODE, ELEM_PREV, ELEM_NEXT, ELEM_TYPE, ELEM_REF,
       ELEM_CPU, ELEM_ADDR, ELEM_FIELDS };
PyObject *elem_get(PyObject *elem, int field);
int elem_set(PyObject *elem, int field, PyObject *value);
/* A write of obj's line (its addr: memory the model does not place where it has none), as
 * Timing.access(cpu, addr_of(obj), write=True) */
int write_line(PyObject *model, PyObject *obj, int cpu);
/* The class ``name`` of the module ``module_name`` (a new reference) */
PyObject *node_class(const char *module_name, const char *name);
/* Where the writable __slots__ field ``name`` of instances of ``type`` is: 0, or -1 with an
 * exception */
int slot_offset(PyObject *type, PyObject *name, Py_ssize_t *offset);
/* A __slots__ field of a class, read and written at its offset in its instances (the
 * attribute protocol, a type lookup and a descriptor call, costs more than some operations
 * do); an object of another class, or with the slot unset, goes by attribute */
typedef struct {
	PyTypeObject *type;  /* NULL until bound */
	Py_ssize_t offset;
	PyObject *name;      /* interned */
} SlotField;
/* A field to bind: its class and its name */
typedef struct {
	const char *class, *name;
} SlotFieldOf;
/* Bind ``fields[i]`` to ``of[i]`` of the module ``module``, ``n`` of them, once (the classes
 * kept for good, as their module keeps them): 0, or -1 with an exception */
int slot_fields_bind(SlotField *fields, const SlotFieldOf *of, int n, const char *module);
/* obj.<field> (a new reference), or NULL with an exception */
PyObject *slot_field_get(const SlotField *f, PyObject *obj);
/* obj.<field> = value: 0, or -1 */
int slot_field_set(const SlotField *f, PyObject *obj, PyObject *value);
/* A Python owner's ``tally`` (emulated/machine/counters.py: an array of int64 counters, its
 * Counter attributes): its buffer held, so that a counter is added to where it lies, without
 * an int object per increment */
typedef struct {
	Py_buffer view;  /* view.obj is NULL until bound */
} Counts;
/* Bind ``c`` to owner.tally and find where the counters ``names`` (n of them) are: the
 * index of names[i], its class's Counter's, in index[i]. 0, or -1 with an exception */
int counts_bind(Counts *c, PyObject *owner, const char *const *names, Py_ssize_t *index,
		int n);
void counts_release(Counts *c);
/* counter ``i`` += delta */
static inline void counts_add(Counts *c, Py_ssize_t i, int64_t delta)
{
	((int64_t *)c->view.buf)[i] += delta;
}
static inline int64_t counts_get(const Counts *c, Py_ssize_t i)
{
	return ((const int64_t *)c->view.buf)[i];
}
/* obj.name(): 0, or -1 with an exception */
int call_method(PyObject *obj, PyObject *name);
/* The end of a with block on a host lock: released, an error raised in the block (rc < 0)
 * kept; returns rc, or -1 where the release failed */
int lock_release(PyObject *lock, int rc);
/* Timing.spin_unlock(cpu, tlock) on the model, an error raised while tlock was held kept:
 * returns rc, or -1 where the unlock failed or an error was set */
int model_unlock(PyObject *model, PyObject *cpu_obj, PyObject *tlock, int rc);

/* _host_lock.c: HostLock, a threading.Lock that C takes by a direct call */
extern PyTypeObject HostLockType;
int host_lock_ready(void);
/* lock.acquire() and lock.release(), directly where lock is a HostLock (else the methods):
 * 0, or -1 with an exception */
int host_lock_acquire(PyObject *lock);
int host_lock_release(PyObject *lock);

/* ``obj`` exported as an array of ``n`` int64 (array('q'), ``what`` names it in the
 * TypeError): 0, or -1; the caller releases ``view`` */
int int64_array_export(PyObject *obj, Py_buffer *view, Py_ssize_t n, const char *what);
/* A map's AccessStats as C counts into it: its node per CPU (a list) and its C counts, local
 * and remote (c_local, c_remote: arrays of int64 per CPU, held exported while bound) */
typedef struct {
	PyObject *cpu_node;
	Py_buffer local, remote;
} AccessCounts;
/* ``stats`` (an AccessStats of a machine of ``ncpus`` CPUs) bound: 0, or -1 */
int access_counts_bind(AccessCounts *a, PyObject *stats, Py_ssize_t ncpus);
void access_counts_release(AccessCounts *a);
static inline int64_t *access_local(AccessCounts *a)
{
	return (int64_t *)a->local.buf;
}
static inline int64_t *access_remote(AccessCounts *a)
{
	return (int64_t *)a->remote.buf;
}
/* AccessStats.access(cpu, node): the access counted local where the CPU is on ``node``, else
 * remote: 0, or -1 with an exception */
int count_access(AccessCounts *a, int cpu, PyObject *node);
/* The running CPU, machine.current.cpu (``current``), of a machine of ``ncpus`` CPUs: the
 * int object (a new reference) and its value in *cpu, or NULL */
PyObject *running_cpu(PyObject *current, int ncpus, int *cpu);
/* The CPU of a native run: ``run_on`` (its machine's CPU), or -1 for a run without a machine,
 * the running one; as running_cpu gives it */
PyObject *native_run_cpu(int64_t run_on, PyObject *current, int ncpus, int *cpu);
/* RunState's slots, bound (at their offsets) at their first use: 0, or -1 */
int bind_run_state_type(void);
/* A run's regions, rs.mem (a new reference), or NULL */
PyObject *run_regions(PyObject *rs);
/* A run's machine, rs.machine (a new reference: None for a bare run), or NULL */
PyObject *run_machine(PyObject *rs);
/* A run's environment and entry maker, rs.env and rs.entry_of (new references), or NULL */
PyObject *run_env(PyObject *rs);
PyObject *run_entry_of(PyObject *rs);
/* rs.cpu = cpu: 0, or -1 */
int run_set_cpu(PyObject *rs, PyObject *cpu);
/* rs.next_region (a new reference), or NULL */
PyObject *run_next_region(PyObject *rs);
/* rs.next_region = region: 0, or -1 */
int run_set_next_region(PyObject *rs, PyObject *region);
/* rs.mem = mem: 0, or -1 */
int run_set_regions(PyObject *rs, PyObject *mem);
/* The region of a run's ``mem`` that ``ptr`` points into (borrowed), or NULL (with an
 * exception only where the lookup failed) */
PyObject *region_at(PyObject *mem, uint64_t ptr);
/* The CPU the run ``rs`` is on (rs.cpu, else machine.current.cpu through ``current``) as
 * running_cpu gives it */
PyObject *run_cpu(PyObject *rs, PyObject *current, int ncpus, int *cpu);
/* The ``size`` bytes at ``ptr`` where they lie in plain memory of a run's ``mem`` (a bytes
 * object), else NULL without an exception (the Python helper then reads them) */
PyObject *plain_bytes(PyObject *mem, uint64_t ptr, Py_ssize_t size);
/* A map helper's R0 for a looked-up value: 0 for None, else its pointer in the run ``rs``
 * (RunState.value_regions, region_of) */
PyObject *value_pointer(PyObject *rs, PyObject *value);

/* _bpf_trace.c: bpf_probe_read_user's common case, a tracepoint's runs, a syscall's entry */
int bpf_trace_ready(void);
PyObject *probe_read_user(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *trace_call_bpf(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *fire_tracepoint(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *enter_syscall(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *enter_syscall_method(PyObject *module, PyObject *const *args, size_t nargsf,
				PyObject *kwnames);

/* _native.c: NativeEntry, a native-tier program's entry */
extern PyTypeObject NativeEntryType;
int native_entry_ready(void);

/* _memalloc.c: a BpfMemAlloc's unit_alloc and unit_free in C */
typedef struct {
	PyObject *ma;          /* the BpfMemAlloc, or NULL: another design, all Python */
	PyObject *caches;      /* its bpf_mem_cache per CPU */
	Counts counts;         /* its _Counters' tally */
	Py_ssize_t count_at[4];  /* where alloc_calls, alloc_failures, free_calls, cache_hits are */
	PyObject *count_lock;  /* which guards them */
	Py_ssize_t low, high;  /* its watermarks */
} MemAlloc;

int mem_alloc_ready(void);
/* Bind a to ma if it is the design done in C: 1, 0 (another design), -1 with an exception */
int mem_alloc_bind(MemAlloc *a, PyObject *ma);
int mem_alloc_traverse(MemAlloc *a, visitproc visit, void *arg);
void mem_alloc_clear(MemAlloc *a);
/* BpfMemAlloc.alloc on cpu (the current CPU): an object, None, or NULL with an exception */
PyObject *unit_alloc(MemAlloc *a, PyObject *model, PyObject *cpu_obj, int cpu);
/* BpfMemAlloc.free of obj on cpu (the current CPU) */
int unit_free(MemAlloc *a, PyObject *model, PyObject *obj, PyObject *cpu_obj, int cpu);

/* _lpm_trie.c: trie_lookup_elem's walk, lpm_trie_walk(root, key, data_size), and LpmCore, an
 * LPM trie's lookup helper in C */
PyObject *lpm_trie_walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
extern PyTypeObject LpmCoreType;
int lpm_core_ready(void);

/* _bpf_lru_list.c: a common BpfLru's pop_free and push_free in C */
typedef struct {
	PyObject *lru;     /* the BpfLru, or NULL: a per-CPU LRU, all Python */
	PyObject *local;   /* its LocalList per CPU */
	PyObject *common;  /* its LruList */
	Counts counts;     /* its tally */
	Py_ssize_t count_at[4];  /* where pops, pushes, evictions, refills are */
} Lru;

int lru_ready(void);
/* Bind l to lru if it is a common LRU: 1, 0 (per-CPU), -1 with an exception */
int lru_bind(Lru *l, PyObject *lru);
int lru_traverse(Lru *l, visitproc visit, void *arg);
void lru_clear(Lru *l);
/* BpfLru.pop_free on cpu (the current CPU): a node, None, or NULL with an exception */
PyObject *lru_pop_free(Lru *l, PyObject *model, PyObject *cpu_obj, int cpu);
/* BpfLru.push_free of node on cpu (the current CPU) */
int lru_push_free(Lru *l, PyObject *model, PyObject *node, PyObject *cpu_obj, int cpu);

#endif
