/*
 * pybpf._cache_model: the emulated machine's cache model in C: Timing.access, and the calls
 * around it on every modeled operation (charge, spin_lock, spin_unlock, locked_access);
 * swap_dicts, the virtual-time scheduler's switch of a task's thread-local state; and
 * pybpf_native_charge, those charges called from the native tier's machine code (at the end).
 * The module's other source, _hashtab.c, is a hash map's update and delete charged here.
 *
 * The Python code in pybpf/emulated/machine/timing.py is the reference; this is the same model,
 * step for step, so every stall, clock, statistic and eviction is the same for any sequence of
 * calls (tests/emulated/machine/test_cache_model.py drives both). Python's OrderedDicts become
 * tables keyed by line number (open addressing, linear probing, backward-shift deletion) whose
 * entries sit on a doubly linked list in LRU order, oldest first:
 *
 *   OrderedDict                          here
 *   cache.get(line)                      tab_find
 *   cache[line] = v (new key: at end;    tab_set (an existing entry keeps its place)
 *     existing key: keeps its place)
 *   cache.pop(line); cache[line] = v     tab_move_newest (or tab_add when absent)
 *   cache.popitem(last=False)            tab_pop_oldest
 *
 * The model writes its results into the Timing's own Python objects (clock, hits, stats,
 * counts), so everything else in Timing reads them as before. It runs holding the GIL
 * throughout, so each call is atomic with respect to other threads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_cache_model.h"

/* SpinLock (timing.py) with its fields in C, so that spin_lock and spin_unlock read and write
 * them without attribute look-ups; Timing.new_lock makes these when the C model runs. Its
 * history is an array here (a list of tuples in Python: one allocated per unlock, walked per
 * contended lock, each a cache miss away), which ``held`` shows as the Python lock's list. */
typedef struct {
	double start, end;
	int cpu;
} Interval;

typedef struct {
	PyObject_HEAD
	unsigned long long addr;
	Interval *held;  /* the intervals CPUs held it, sorted as (start, end, cpu) tuples */
	Py_ssize_t nheld, cap;
	double acquired_at;
	double last_end;  /* the latest end of any interval */
	int holder;
} Lock;

static PyMemberDef lock_members[] = {
	{"addr", T_ULONGLONG, offsetof(Lock, addr), READONLY, "the lock's address (its line)"},
	{"acquired_at", T_DOUBLE, offsetof(Lock, acquired_at), 0, "when its holder took it"},
	{"holder", T_INT, offsetof(Lock, holder), 0, "the CPU holding it, -1 none"},
	{"last_end", T_DOUBLE, offsetof(Lock, last_end), 0,
	 "the latest end of any interval: a CPU asking later never waits"},
	{NULL},
};

/* Room for ``n`` intervals: 0, or -1 with MemoryError */
static int lock_reserve(Lock *lock, Py_ssize_t n)
{
	if (n <= lock->cap)
		return 0;
	Py_ssize_t cap = n < 8 ? 8 : n + n / 2;
	Interval *held = PyMem_Realloc(lock->held, (size_t)cap * sizeof(Interval));
	if (held == NULL) {
		PyErr_NoMemory();
		return -1;
	}
	lock->held = held;
	lock->cap = cap;
	return 0;
}

static PyObject *lock_get_held(PyObject *op, void *closure)
{
	Lock *lock = (Lock *)op;
	PyObject *list = PyList_New(lock->nheld);
	for (Py_ssize_t i = 0; list != NULL && i < lock->nheld; i++) {
		Interval *iv = &lock->held[i];
		PyObject *item = Py_BuildValue("(ddi)", iv->start, iv->end, iv->cpu);
		if (item == NULL)
			Py_CLEAR(list);
		else
			PyList_SET_ITEM(list, i, item);
	}
	return list;
}

/* held = a list of (start, end, cpu), sorted */
static int lock_set_held(PyObject *op, PyObject *value, void *closure)
{
	Lock *lock = (Lock *)op;
	if (value == NULL || !PyList_Check(value)) {
		PyErr_SetString(PyExc_TypeError, "a lock's history is a list of (start, end, cpu)");
		return -1;
	}
	/* parsed whole before it replaces the history, which a bad interval leaves as it was */
	Py_ssize_t n = PyList_GET_SIZE(value);
	Interval *held = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Interval));
	if (held == NULL) {
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		Interval *iv = &held[i];
		if (!PyArg_ParseTuple(PyList_GET_ITEM(value, i), "ddi;a lock interval is (start, "
				      "end, cpu)", &iv->start, &iv->end, &iv->cpu)) {
			PyMem_Free(held);
			return -1;
		}
	}
	PyMem_Free(lock->held);
	lock->held = held;
	lock->cap = n ? n : 1;
	lock->nheld = n;
	return 0;
}

static PyGetSetDef lock_getset[] = {
	{"held", lock_get_held, lock_set_held,
	 "the intervals CPUs held it, (start, end, cpu), sorted (a copy)", NULL},
	{NULL},
};

static int lock_init(PyObject *op, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"addr", "held", "acquired_at", "holder", "last_end", NULL};
	Lock *lock = (Lock *)op;
	PyObject *held;
	double acquired_at = 0.0, last_end = 0.0;
	int holder = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "KO!|did", kwlist, &lock->addr, &PyList_Type,
					 &held, &acquired_at, &holder, &last_end)
	    || lock_set_held(op, held, NULL) < 0)
		return -1;
	lock->acquired_at = acquired_at;
	lock->holder = holder;
	lock->last_end = last_end;
	return 0;
}

static void lock_dealloc(PyObject *op)
{
	PyMem_Free(((Lock *)op)->held);
	Py_TYPE(op)->tp_free(op);
}

static PyTypeObject LockType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pybpf._cache_model.SpinLock",
	.tp_doc = "SpinLock(addr, held, acquired_at=0.0, holder=-1, last_end=0.0): timing.SpinLock "
		  "with its fields in C",
	.tp_basicsize = sizeof(Lock),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = PyType_GenericNew,
	.tp_init = lock_init,
	.tp_dealloc = lock_dealloc,
	.tp_members = lock_members,
	.tp_getset = lock_getset,
};

static Lock *as_lock(PyObject *obj)
{
	if (!Py_IS_TYPE(obj, &LockType)) {
		PyErr_Format(PyExc_TypeError, "a lock of the C model is a %s (Timing.new_lock), not "
			     "%.100s", LockType.tp_name, Py_TYPE(obj)->tp_name);
		return NULL;
	}
	return (Lock *)obj;
}

typedef struct {
	uint64_t line;
	int64_t value;  /* a private cache: the version its copy carries; the line table: version */
	int32_t owner;  /* the line table: the CPU holding the line modified, -1 none */
	int32_t prev;   /* LRU order: the next older entry, -1 none */
	int32_t next;   /* LRU order: the next newer entry, -1 none; a free entry: the next free */
} Entry;

typedef struct {
	Entry *entries;  /* a pool; freed entries are chained through next */
	int32_t allocated;
	int32_t top;     /* entries handed out from the pool at least once */
	int32_t free;    /* the first free entry, -1 none */
	int32_t *index;  /* open addressing: an entry number, -1 empty */
	int bits;        /* the index has 1 << bits slots */
	Py_ssize_t len;
	int32_t oldest, newest;
} Table;

static inline uint32_t tab_home(const Table *t, uint64_t line)
{
	return (uint32_t)((line * 0x9E3779B97F4A7C15ull) >> (64 - t->bits));
}

static int tab_init(Table *t)
{
	t->bits = 4;
	t->index = PyMem_Malloc(sizeof(int32_t) << t->bits);
	t->allocated = 8;
	t->entries = PyMem_Malloc(sizeof(Entry) * t->allocated);
	if (t->index == NULL || t->entries == NULL) {
		PyErr_NoMemory();
		return -1;
	}
	memset(t->index, 0xff, sizeof(int32_t) << t->bits);
	t->top = 0;
	t->free = -1;
	t->len = 0;
	t->oldest = t->newest = -1;
	return 0;
}

static void tab_free(Table *t)
{
	PyMem_Free(t->index);
	PyMem_Free(t->entries);
	t->index = NULL;
	t->entries = NULL;
}

/* The index slot holding line, or -1. */
static inline int32_t tab_slot(const Table *t, uint64_t line)
{
	uint32_t mask = (1u << t->bits) - 1;
	for (uint32_t i = tab_home(t, line);; i = (i + 1) & mask) {
		int32_t e = t->index[i];
		if (e < 0)
			return -1;
		if (t->entries[e].line == line)
			return (int32_t)i;
	}
}

/* The entry of line, or -1. */
static inline int32_t tab_find(const Table *t, uint64_t line)
{
	int32_t slot = tab_slot(t, line);
	return slot < 0 ? -1 : t->index[slot];
}

static void tab_place(Table *t, int32_t e)
{
	uint32_t mask = (1u << t->bits) - 1;
	uint32_t i = tab_home(t, t->entries[e].line);
	while (t->index[i] >= 0)
		i = (i + 1) & mask;
	t->index[i] = e;
}

static int tab_grow_index(Table *t)
{
	if (t->bits >= 31) {
		PyErr_SetString(PyExc_MemoryError, "cache model: too many lines");
		return -1;
	}
	int32_t *old = t->index;
	uint32_t old_size = 1u << t->bits;
	int32_t *index = PyMem_Malloc(sizeof(int32_t) << (t->bits + 1));
	if (index == NULL) {
		PyErr_NoMemory();
		return -1;
	}
	memset(index, 0xff, sizeof(int32_t) << (t->bits + 1));
	t->index = index;
	t->bits++;
	for (uint32_t i = 0; i < old_size; i++)
		if (old[i] >= 0)
			tab_place(t, old[i]);
	PyMem_Free(old);
	return 0;
}

static inline void lru_unlink(Table *t, int32_t e)
{
	Entry *x = &t->entries[e];
	if (x->prev >= 0)
		t->entries[x->prev].next = x->next;
	else
		t->oldest = x->next;
	if (x->next >= 0)
		t->entries[x->next].prev = x->prev;
	else
		t->newest = x->prev;
}

static inline void lru_append(Table *t, int32_t e)
{
	Entry *x = &t->entries[e];
	x->prev = t->newest;
	x->next = -1;
	if (t->newest >= 0)
		t->entries[t->newest].next = e;
	else
		t->oldest = e;
	t->newest = e;
}

/* A new entry for line (not in the table), the newest; -1 with an exception set. */
static int32_t tab_add(Table *t, uint64_t line, int64_t value)
{
	if ((t->len + 1) * 2 > ((Py_ssize_t)1 << t->bits) && tab_grow_index(t) < 0)
		return -1;
	int32_t e;
	if (t->free >= 0) {
		e = t->free;
		t->free = t->entries[e].next;
	} else {
		if (t->top == t->allocated) {
			if (t->allocated > INT32_MAX / 2) {
				PyErr_SetString(PyExc_MemoryError, "cache model: too many lines");
				return -1;
			}
			Entry *grown = PyMem_Realloc(t->entries, sizeof(Entry) * t->allocated * 2);
			if (grown == NULL) {
				PyErr_NoMemory();
				return -1;
			}
			t->entries = grown;
			t->allocated *= 2;
		}
		e = t->top++;
	}
	Entry *x = &t->entries[e];
	x->line = line;
	x->value = value;
	x->owner = -1;
	tab_place(t, e);
	lru_append(t, e);
	t->len++;
	return e;
}

/* Drop the entry at index slot ``slot`` (backward-shift deletion keeps every probe run whole). */
static void tab_remove_slot(Table *t, int32_t slot)
{
	uint32_t mask = (1u << t->bits) - 1;
	uint32_t i = (uint32_t)slot;
	int32_t e = t->index[i];
	lru_unlink(t, e);
	t->entries[e].next = t->free;
	t->free = e;
	t->len--;
	for (uint32_t j = (i + 1) & mask;; j = (j + 1) & mask) {
		int32_t moved = t->index[j];
		if (moved < 0)
			break;
		uint32_t k = tab_home(t, t->entries[moved].line);
		if (((j - k) & mask) >= ((j - i) & mask)) {  /* its home is not in (i, j] */
			t->index[i] = moved;
			i = j;
		}
	}
	t->index[i] = -1;
}

static inline int tab_remove(Table *t, uint64_t line)
{
	int32_t slot = tab_slot(t, line);
	if (slot < 0)
		return 0;
	tab_remove_slot(t, slot);
	return 1;
}

static inline void tab_move_newest(Table *t, int32_t e)
{
	if (t->newest != e) {
		lru_unlink(t, e);
		lru_append(t, e);
	}
}

/* cache[line] = value: an existing entry keeps its place, a new one is the newest. */
static inline int tab_set(Table *t, uint64_t line, int64_t value)
{
	int32_t e = tab_find(t, line);
	if (e >= 0) {
		t->entries[e].value = value;
		return 0;
	}
	return tab_add(t, line, value) < 0 ? -1 : 0;
}

/* popitem(last=False): the oldest line, removed; 0 and *line unset when the table is empty. */
static inline int tab_pop_oldest(Table *t, uint64_t *line)
{
	if (t->oldest < 0)
		return 0;
	*line = t->entries[t->oldest].line;
	tab_remove(t, *line);
	return 1;
}

/* Interned names: the memory kinds of Timing.stats, the events; 1 and 0. */
static PyObject *s_shared_hit, *s_dram_local, *s_dram_remote, *s_transfer_local,
	*s_transfer_remote, *s_lock_wait, *s_spin_lock, *s_one, *s_zero;

struct CacheModel {
	PyObject_HEAD
	int ncpus, nnodes;
	int *cpu_node;
	int line_shift, node_shift;
	Py_ssize_t private_lines, shared_lines;
	double shared_hit, spin_lock_ns;
	double *dram;      /* [node][home], nnodes x nnodes */
	double *transfer;  /* [node][owner's node] */
	Table *private;    /* per CPU: line -> the version of its copy */
	Table *shared;     /* per node: lines */
	Table lines;       /* line -> version (absent: 0) and the CPU holding it modified */
	Py_ssize_t lock_history;
	/* The Timing's objects, updated in place; cost is read only. */
	PyObject *clock, *hits, *stats, *counts, *cost;
	Py_buffer hits_view;  /* hits, an array of int64 per CPU, held exported */
};

static inline int64_t line_version(const CacheModel *m, uint64_t line)
{
	int32_t e = tab_find(&m->lines, line);
	return e < 0 ? 0 : m->lines.entries[e].value;
}

static inline int32_t line_owner(const CacheModel *m, uint64_t line)
{
	int32_t e = tab_find(&m->lines, line);
	return e < 0 ? -1 : m->lines.entries[e].owner;
}

/* _dirty.pop(line, None) */
static inline void clear_owner(CacheModel *m, uint64_t line)
{
	int32_t e = tab_find(&m->lines, line);
	if (e >= 0)
		m->lines.entries[e].owner = -1;
}

int int64_array_export(PyObject *obj, Py_buffer *view, Py_ssize_t n, const char *what)
{
	if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
		return -1;
	if (view->format != NULL && strcmp(view->format, "q") == 0 && view->itemsize == 8
	    && view->len == n * 8)
		return 0;
	PyBuffer_Release(view);
	PyErr_Format(PyExc_TypeError, "%s is an array of %zd int64 (array('q'))", what, n);
	return -1;
}

int access_counts_bind(AccessCounts *a, PyObject *stats, Py_ssize_t ncpus)
{
	PyObject *local = NULL, *remote = NULL;
	int rc = -1;
	if ((a->cpu_node = PyObject_GetAttrString(stats, "cpu_node")) == NULL
	    || (local = PyObject_GetAttrString(stats, "c_local")) == NULL
	    || (remote = PyObject_GetAttrString(stats, "c_remote")) == NULL)
		goto out;
	if (!PyList_CheckExact(a->cpu_node) || PyList_GET_SIZE(a->cpu_node) != ncpus) {
		PyErr_SetString(PyExc_TypeError, "AccessStats.cpu_node is a list, a node per CPU");
		goto out;
	}
	if (int64_array_export(local, &a->local, ncpus, "AccessStats.c_local") < 0)
		goto out;
	if (int64_array_export(remote, &a->remote, ncpus, "AccessStats.c_remote") < 0) {
		PyBuffer_Release(&a->local);
		goto out;
	}
	rc = 0;
out:
	if (rc < 0)
		Py_CLEAR(a->cpu_node);
	Py_XDECREF(local);
	Py_XDECREF(remote);
	return rc;
}

void access_counts_release(AccessCounts *a)
{
	if (a->cpu_node == NULL)
		return;
	Py_CLEAR(a->cpu_node);
	PyBuffer_Release(&a->local);
	PyBuffer_Release(&a->remote);
}

int count_access(AccessCounts *a, int cpu, PyObject *node)
{
	int here = PyObject_RichCompareBool(PyList_GET_ITEM(a->cpu_node, cpu), node, Py_EQ);
	if (here < 0)
		return -1;
	(here ? access_local(a) : access_remote(a))[cpu] += 1;
	return 0;
}

/* self.hits[cpu] += 1 */
static int count_hit(CacheModel *m, int cpu)
{
	((int64_t *)m->hits_view.buf)[cpu] += 1;
	return 0;
}

/* self.clock[cpu] += ns */
static int advance(CacheModel *m, int cpu, double ns)
{
	PyObject *old = PyList_GET_ITEM(m->clock, cpu);
	double now = PyFloat_AsDouble(old);
	if (now == -1.0 && PyErr_Occurred())
		return -1;
	PyObject *t = PyFloat_FromDouble(now + ns);
	if (t == NULL)
		return -1;
	PyList_SET_ITEM(m->clock, cpu, t);
	Py_DECREF(old);
	return 0;
}

/* x[i] += by, in place in a list */
static int list_add(PyObject *list, Py_ssize_t i, PyObject *by)
{
	PyObject *old = PyList_GET_ITEM(list, i);
	PyObject *sum = PyNumber_Add(old, by);
	if (sum == NULL)
		return -1;
	PyList_SET_ITEM(list, i, sum);
	Py_DECREF(old);
	return 0;
}

/* Timing._account(cpu, event, 1, ns) */
static int account(CacheModel *m, int cpu, PyObject *event, double ns)
{
	if (advance(m, cpu, ns) < 0)
		return -1;
	PyObject *stats = PyList_GET_ITEM(m->stats, cpu);
	PyObject *entry = PyDict_GetItemWithError(stats, event);
	if (entry == NULL && PyErr_Occurred())
		return -1;
	PyObject *n = PyLong_FromLong(1), *t = PyFloat_FromDouble(ns);
	int rc = -1;
	if (n == NULL || t == NULL)
		goto out;
	if (entry == NULL) {
		PyObject *fresh = PyList_New(2);
		if (fresh == NULL)
			goto out;
		PyList_SET_ITEM(fresh, 0, Py_NewRef(n));
		PyList_SET_ITEM(fresh, 1, Py_NewRef(t));
		rc = PyDict_SetItem(stats, event, fresh);
		Py_DECREF(fresh);
	} else if (!PyList_CheckExact(entry) || PyList_GET_SIZE(entry) != 2) {
		PyErr_SetString(PyExc_TypeError, "cache model: a stats entry is not [count, ns]");
	} else {
		rc = list_add(entry, 0, n) < 0 || list_add(entry, 1, t) < 0 ? -1 : 0;
	}
out:
	Py_XDECREF(n);
	Py_XDECREF(t);
	return rc;
}

/* Timing._own: read for ownership, every other copy of line becomes stale. */
static int own(CacheModel *m, int cpu, uint64_t line, int64_t version, Table *private)
{
	version += 1;
	int32_t e = tab_find(&m->lines, line);
	if (e < 0 && (e = tab_add(&m->lines, line, version)) < 0)
		return -1;
	m->lines.entries[e].value = version;
	if (tab_set(private, line, version) < 0)
		return -1;
	m->lines.entries[e].owner = cpu;
	return 0;
}

/* Timing._forget: a line no cache holds needs no version or owner. */
static void forget(CacheModel *m, uint64_t line)
{
	for (int c = 0; c < m->ncpus; c++)
		if (tab_find(&m->private[c], line) >= 0)
			return;
	for (int n = 0; n < m->nnodes; n++)
		if (tab_find(&m->shared[n], line) >= 0)
			return;
	tab_remove(&m->lines, line);
}

/* Timing.access: the stall in ns (and charged), or -1.0 with an exception set. */
double model_access(CacheModel *m, int cpu, uint64_t addr, int write)
{
	if (!addr)
		return 0.0;
	uint64_t line = addr >> m->line_shift;
	Table *private = &m->private[cpu];
	int64_t version = line_version(m, line);
	int32_t e = tab_find(private, line);
	if (e >= 0 && private->entries[e].value == version) {  /* a hit in the private cache */
		tab_move_newest(private, e);
		if (count_hit(m, cpu) < 0)
			return -1;
		if (write && line_owner(m, line) != cpu && own(m, cpu, line, version, private) < 0)
			return -1;
		return 0.0;
	}
	int node = m->cpu_node[cpu];
	int32_t owner = line_owner(m, line);
	if (owner < 0)
		owner = cpu;
	PyObject *kind;
	double ns;
	int32_t copy;
	if (owner != cpu && (copy = tab_find(&m->private[owner], line)) >= 0
	    && m->private[owner].entries[copy].value == version) {
		int owner_node = m->cpu_node[owner];
		kind = owner_node != node ? s_transfer_remote : s_transfer_local;
		ns = m->transfer[node * m->nnodes + owner_node];
		if (!write)
			clear_owner(m, line);  /* written back: shared and clean from now on */
	} else {
		if (owner != cpu)
			clear_owner(m, line);  /* the owner's copy was evicted, so written back */
		Table *shared = &m->shared[node];
		if (tab_remove(shared, line)) {
			kind = s_shared_hit;
			ns = m->shared_hit;
		} else {
			uint64_t home = addr >> m->node_shift;
			if (home >= (uint64_t)m->nnodes) {
				PyErr_Format(PyExc_IndexError, "address %#llx is on node %llu, which the "
					     "machine does not have", (unsigned long long)addr,
					     (unsigned long long)home);
				return -1;
			}
			kind = (int)home == node ? s_dram_local : s_dram_remote;
			ns = m->dram[node * m->nnodes + home];
		}
		if (tab_add(shared, line, 0) < 0)
			return -1;
		uint64_t evicted;
		if (shared->len > m->shared_lines && tab_pop_oldest(shared, &evicted))
			forget(m, evicted);
	}
	tab_remove(private, line);  /* a stale copy goes: the fresh one is the most recent */
	if (tab_add(private, line, version) < 0)
		return -1;
	uint64_t evicted;
	if (private->len > m->private_lines)
		tab_pop_oldest(private, &evicted);
	if (write && line_owner(m, line) != cpu && own(m, cpu, line, version, private) < 0)
		return -1;
	if (account(m, cpu, kind, ns) < 0)
		return -1;
	return ns;
}

int parse_cpu(CacheModel *m, PyObject *obj, int *cpu)
{
	long c = PyLong_AsLong(obj);
	if (c == -1 && PyErr_Occurred())
		return -1;
	if (c < 0 || c >= m->ncpus) {
		PyErr_Format(PyExc_IndexError, "CPU %ld is not a CPU of the machine", c);
		return -1;
	}
	*cpu = (int)c;
	return 0;
}

int parse_addr(PyObject *obj, uint64_t *addr)
{
	if (!PyLong_Check(obj)) {
		PyErr_Format(PyExc_TypeError, "an address is an int, not %.100s", Py_TYPE(obj)->tp_name);
		return -1;
	}
	/* the mask conversion reads the digits; PyLong_AsUnsignedLongLong goes through a byte
	 * array for any int over one digit, which every 64-bit register value is */
	if (_PyLong_Sign(obj) < 0 || _PyLong_NumBits(obj) > 64) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_OverflowError, "an address is an int of 0 to 2**64 - 1");
		return -1;
	}
	*addr = PyLong_AsUnsignedLongLongMask(obj);
	return 0;
}

static PyObject *cm_access(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
			   PyObject *kwnames)
{
	CacheModel *m = (CacheModel *)op;
	PyObject *write_obj = nargs == 3 ? args[2] : NULL;
	Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
	if (nkw == 1 && nargs == 2
	    && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "write") == 0)
		write_obj = args[2];
	else if (nkw != 0 || nargs < 2 || nargs > 3) {
		PyErr_SetString(PyExc_TypeError, "access(cpu, addr, write=False)");
		return NULL;
	}
	int cpu, write = 0;
	uint64_t addr;
	if (parse_cpu(m, args[0], &cpu) < 0 || parse_addr(args[1], &addr) < 0)
		return NULL;
	if (write_obj != NULL && (write = PyObject_IsTrue(write_obj)) < 0)
		return NULL;
	double ns = model_access(m, cpu, addr, write);
	if (ns == -1.0 && PyErr_Occurred())
		return NULL;
	return PyFloat_FromDouble(ns);
}

/* The time from which ``cpu`` holds ``lock`` when it asks at t: past every interval another
 * CPU held it at that time (Timing.spin_lock's loop; the intervals are sorted). */
static void lock_free_at(const Lock *lock, int cpu, double *t)
{
	for (Py_ssize_t i = 0; i < lock->nheld; i++) {
		const Interval *iv = &lock->held[i];
		if (iv->start <= *t && *t < iv->end && iv->cpu != cpu)
			*t = iv->end;
	}
}

PyObject *cm_spin_lock(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	CacheModel *m = (CacheModel *)op;
	int cpu;
	if (nargs != 2) {
		PyErr_SetString(PyExc_TypeError, "spin_lock(cpu, lock)");
		return NULL;
	}
	Lock *lock = as_lock(args[1]);
	if (lock == NULL || parse_cpu(m, args[0], &cpu) < 0)
		return NULL;
	double now = PyFloat_AsDouble(PyList_GET_ITEM(m->clock, cpu));
	if (now == -1.0 && PyErr_Occurred())
		return NULL;
	if (now < lock->last_end) {
		double t = now;
		lock_free_at(lock, cpu, &t);
		if (t > now && account(m, cpu, s_lock_wait, t - now) < 0)  /* wait_until */
			return NULL;
	}
	uint64_t addr = lock->addr;
	uint64_t line = addr >> m->line_shift;
	Table *private = &m->private[cpu];
	int32_t e = tab_find(private, line);
	if (line_owner(m, line) == cpu && e >= 0
	    && private->entries[e].value == line_version(m, line)) {
		tab_move_newest(private, e);  /* the hot case: this CPU holds the line */
		if (count_hit(m, cpu) < 0)
			return NULL;
	} else if (model_access(m, cpu, addr, 1) == -1.0 && PyErr_Occurred()) {
		return NULL;
	}
	if (advance(m, cpu, m->spin_lock_ns) < 0)
		return NULL;
	PyObject *counts = PyList_GET_ITEM(m->counts, cpu);
	PyObject *count = PyDict_GetItemWithError(counts, s_spin_lock);
	if (count == NULL && PyErr_Occurred())
		return NULL;
	PyObject *next = count == NULL ? PyLong_FromLong(1) : PyNumber_Add(count, s_one);
	if (next == NULL)
		return NULL;
	int rc = PyDict_SetItem(counts, s_spin_lock, next);
	Py_DECREF(next);
	if (rc < 0)
		return NULL;
	lock->acquired_at = PyFloat_AsDouble(PyList_GET_ITEM(m->clock, cpu));
	if (lock->acquired_at == -1.0 && PyErr_Occurred())
		return NULL;
	lock->holder = cpu;
	Py_RETURN_NONE;
}

/* Timing.charge: work, n times the profile's cost of event. */
PyObject *cm_charge(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	CacheModel *m = (CacheModel *)op;
	int cpu;
	if (nargs < 2 || nargs > 3) {
		PyErr_SetString(PyExc_TypeError, "charge(cpu, event, n=1)");
		return NULL;
	}
	if (parse_cpu(m, args[0], &cpu) < 0)
		return NULL;
	PyObject *event = args[1], *n = nargs == 3 ? args[2] : s_one;
	PyObject *cost = PyDict_GetItemWithError(m->cost, event);
	if (cost == NULL) {
		if (PyErr_Occurred())
			return NULL;
		PyObject *events = PySequence_List(m->cost);
		if (events != NULL && PyList_Sort(events) == 0)
			PyErr_Format(PyExc_ValueError, "no cost %R in the model; events are %R", event,
				     events);
		Py_XDECREF(events);
		return NULL;
	}
	/* clock += cost * n, as Python's float arithmetic does it: in doubles where the cost and
	 * the clock are floats and n an int (float * int converts n as PyLong_AsDouble does) */
	PyObject *old = PyList_GET_ITEM(m->clock, cpu), *sum;
	if (PyFloat_CheckExact(cost) && PyFloat_CheckExact(old) && PyLong_CheckExact(n)) {
		double times = PyLong_AsDouble(n);
		if (times == -1.0 && PyErr_Occurred())
			return NULL;
		sum = PyFloat_FromDouble(PyFloat_AS_DOUBLE(old) + PyFloat_AS_DOUBLE(cost) * times);
	} else {
		PyObject *product = PyNumber_Multiply(cost, n);
		if (product == NULL)
			return NULL;
		sum = PyNumber_Add(old, product);
		Py_DECREF(product);
	}
	if (sum == NULL)
		return NULL;
	PyList_SET_ITEM(m->clock, cpu, sum);
	Py_DECREF(old);
	PyObject *counts = PyList_GET_ITEM(m->counts, cpu);
	PyObject *count = PyDict_GetItemWithError(counts, event);
	if (count == NULL && PyErr_Occurred())
		return NULL;
	PyObject *next = count == NULL ? PyNumber_Add(s_zero, n)
		: PyNumber_Add(count, n);
	if (next == NULL)
		return NULL;
	int rc = PyDict_SetItem(counts, event, next);
	Py_DECREF(next);
	if (rc < 0)
		return NULL;
	Py_RETURN_NONE;
}

/* Whether interval a sorts before b, as the Python lock's (start, end, cpu) tuples */
static int interval_less(const Interval *a, const Interval *b)
{
	if (a->start != b->start)
		return a->start < b->start;
	if (a->end != b->end)
		return a->end < b->end;
	return a->cpu < b->cpu;
}

/* Timing.spin_unlock: the interval the lock was held joins its sorted history. */
PyObject *cm_spin_unlock(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	CacheModel *m = (CacheModel *)op;
	int cpu;
	if (nargs != 2) {
		PyErr_SetString(PyExc_TypeError, "spin_unlock(cpu, lock)");
		return NULL;
	}
	Lock *lock = as_lock(args[1]);
	if (lock == NULL || parse_cpu(m, args[0], &cpu) < 0)
		return NULL;
	double end = PyFloat_AsDouble(PyList_GET_ITEM(m->clock, cpu));
	if (end == -1.0 && PyErr_Occurred())
		return NULL;
	Interval interval = {lock->holder == cpu ? lock->acquired_at : end, end, cpu};
	if (lock_reserve(lock, lock->nheld + 1) < 0)
		return NULL;
	/* bisect.insort (insort_right); an interval starting at or after the last one is the
	 * common case, appended */
	Py_ssize_t len = lock->nheld, lo = len;
	if (len && interval.start < lock->held[len - 1].start) {
		Py_ssize_t hi = len;
		lo = 0;
		while (lo < hi) {
			Py_ssize_t mid = (lo + hi) / 2;
			if (interval_less(&interval, &lock->held[mid]))
				hi = mid;
			else
				lo = mid + 1;
		}
		memmove(&lock->held[lo + 1], &lock->held[lo], (size_t)(len - lo) * sizeof(Interval));
	}
	lock->held[lo] = interval;
	lock->nheld = len + 1;
	lock->holder = -1;
	if (end > lock->last_end)
		lock->last_end = end;
	/* a CPU further behind than the latest half does not wait: del held[:-history // 2] */
	if (lock->nheld > m->lock_history) {
		Py_ssize_t keep = (m->lock_history + 1) / 2;
		memmove(lock->held, &lock->held[lock->nheld - keep], (size_t)keep * sizeof(Interval));
		lock->nheld = keep;
	}
	Py_RETURN_NONE;
}

/* Timing.locked_access: spin_lock, access, spin_unlock (a list push or pop under its lock),
 * in one call. */
PyObject *cm_locked_access(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
				  PyObject *kwnames)
{
	PyObject *write_obj = nargs == 4 ? args[3] : Py_True;
	Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
	if (nkw == 1 && nargs == 3
	    && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "write") == 0)
		write_obj = args[3];
	else if (nkw != 0 || nargs < 3 || nargs > 4) {
		PyErr_SetString(PyExc_TypeError, "locked_access(cpu, lock, addr, write=True)");
		return NULL;
	}
	PyObject *done = cm_spin_lock(op, args, 2);
	if (done == NULL)
		return NULL;
	Py_DECREF(done);
	PyObject *access_args[3] = {args[0], args[2], write_obj};
	done = cm_access(op, access_args, 3, NULL);
	if (done == NULL)
		return NULL;
	Py_DECREF(done);
	return cm_spin_unlock(op, args, 2);
}

static PyObject *int64_pair(uint64_t line, int64_t value)
{
	return Py_BuildValue("(KL)", (unsigned long long)line, (long long)value);
}

/* Timing.cache_state's dict: private caches as [(line, version)] and shared ones as [line],
 * oldest first; version {line: version}; dirty {line: cpu}. */
static PyObject *cm_state(PyObject *op, PyObject *unused)
{
	CacheModel *m = (CacheModel *)op;
	PyObject *private = PyList_New(m->ncpus), *shared = PyList_New(m->nnodes);
	PyObject *version = PyDict_New(), *dirty = PyDict_New(), *out = NULL;
	if (private == NULL || shared == NULL || version == NULL || dirty == NULL)
		goto fail;
	for (int c = 0; c < m->ncpus; c++) {
		Table *t = &m->private[c];
		PyObject *items = PyList_New(0);
		if (items == NULL)
			goto fail;
		PyList_SET_ITEM(private, c, items);
		for (int32_t e = t->oldest; e >= 0; e = t->entries[e].next) {
			PyObject *pair = int64_pair(t->entries[e].line, t->entries[e].value);
			if (pair == NULL || PyList_Append(items, pair) < 0) {
				Py_XDECREF(pair);
				goto fail;
			}
			Py_DECREF(pair);
		}
	}
	for (int n = 0; n < m->nnodes; n++) {
		Table *t = &m->shared[n];
		PyObject *items = PyList_New(0);
		if (items == NULL)
			goto fail;
		PyList_SET_ITEM(shared, n, items);
		for (int32_t e = t->oldest; e >= 0; e = t->entries[e].next) {
			PyObject *line = PyLong_FromUnsignedLongLong(t->entries[e].line);
			if (line == NULL || PyList_Append(items, line) < 0) {
				Py_XDECREF(line);
				goto fail;
			}
			Py_DECREF(line);
		}
	}
	for (int32_t e = m->lines.oldest; e >= 0; e = m->lines.entries[e].next) {
		Entry x = m->lines.entries[e];  /* a copy: allocating may run a collection */
		PyObject *line = PyLong_FromUnsignedLongLong(x.line);
		PyObject *v = PyLong_FromLongLong(x.value);
		PyObject *o = x.owner >= 0 ? PyLong_FromLong(x.owner) : NULL;
		int rc = line == NULL || v == NULL || (x.owner >= 0 && o == NULL)
			|| PyDict_SetItem(version, line, v) < 0
			|| (o != NULL && PyDict_SetItem(dirty, line, o) < 0);
		Py_XDECREF(line);
		Py_XDECREF(v);
		Py_XDECREF(o);
		if (rc)
			goto fail;
	}
	out = Py_BuildValue("{sOsOsOsO}", "private", private, "shared", shared, "version",
			    version, "dirty", dirty);
fail:
	Py_XDECREF(private);
	Py_XDECREF(shared);
	Py_XDECREF(version);
	Py_XDECREF(dirty);
	return out;
}

static int float_table(PyObject *rows, int n, double *out)
{
	if (!PyList_Check(rows) || PyList_GET_SIZE(rows) != n) {
		PyErr_Format(PyExc_ValueError, "a cost table needs %d rows", n);
		return -1;
	}
	for (int a = 0; a < n; a++) {
		PyObject *row = PyList_GET_ITEM(rows, a);
		if (!PyList_Check(row) || PyList_GET_SIZE(row) != n) {
			PyErr_Format(PyExc_ValueError, "a cost table needs %d columns", n);
			return -1;
		}
		for (int b = 0; b < n; b++) {
			out[a * n + b] = PyFloat_AsDouble(PyList_GET_ITEM(row, b));
			if (out[a * n + b] == -1.0 && PyErr_Occurred())
				return -1;
		}
	}
	return 0;
}

static void cm_release(CacheModel *m)
{
	if (m->private != NULL)
		for (int c = 0; c < m->ncpus; c++)
			tab_free(&m->private[c]);
	if (m->shared != NULL)
		for (int n = 0; n < m->nnodes; n++)
			tab_free(&m->shared[n]);
	tab_free(&m->lines);
	PyMem_Free(m->private);
	PyMem_Free(m->shared);
	PyMem_Free(m->cpu_node);
	PyMem_Free(m->dram);
	PyMem_Free(m->transfer);
	m->private = m->shared = NULL;
	m->cpu_node = NULL;
	m->dram = m->transfer = NULL;
	Py_CLEAR(m->clock);
	if (m->hits_view.obj != NULL)
		PyBuffer_Release(&m->hits_view);
	Py_CLEAR(m->hits);
	Py_CLEAR(m->stats);
	Py_CLEAR(m->counts);
	Py_CLEAR(m->cost);
}

static int cm_init(PyObject *op, PyObject *args, PyObject *kwds)
{
	CacheModel *m = (CacheModel *)op;
	static char *kwlist[] = {"cpu_node", "line_shift", "node_shift", "private_lines",
				 "shared_lines", "shared_hit", "dram", "transfer", "spin_lock_ns",
				 "lock_history", "cost", "clock", "hits", "stats", "counts", NULL};
	PyObject *cpu_node, *dram, *transfer, *cost, *clock, *hits, *stats, *counts;
	Py_ssize_t lock_history;
	int line_shift, node_shift;
	Py_ssize_t private_lines, shared_lines;
	double shared_hit, spin_lock_ns;
	if (m->private != NULL) {
		PyErr_SetString(PyExc_RuntimeError, "CacheModel is initialised once");
		return -1;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!iinndO!O!dnO!O!OO!O!", kwlist,
					 &PyList_Type, &cpu_node, &line_shift, &node_shift,
					 &private_lines, &shared_lines, &shared_hit, &PyList_Type, &dram,
					 &PyList_Type, &transfer, &spin_lock_ns, &lock_history,
					 &PyDict_Type, &cost, &PyList_Type, &clock, &hits,
					 &PyList_Type, &stats, &PyList_Type, &counts))
		return -1;
	Py_ssize_t ncpus = PyList_GET_SIZE(cpu_node);
	if (int64_array_export(hits, &m->hits_view, ncpus, "hits") < 0)
		return -1;
	if (ncpus < 1 || ncpus > INT32_MAX || PyList_GET_SIZE(clock) != ncpus
	    || PyList_GET_SIZE(stats) != ncpus || PyList_GET_SIZE(counts) != ncpus) {
		PyErr_SetString(PyExc_ValueError, "clock, hits, stats and counts need one entry "
				"per CPU of cpu_node");
		return -1;
	}
	if (line_shift < 0 || line_shift > 63 || node_shift < 0 || node_shift > 63) {
		PyErr_SetString(PyExc_ValueError, "shifts are 0..63");
		return -1;
	}
	m->ncpus = (int)ncpus;
	m->nnodes = (int)PyList_GET_SIZE(dram);
	m->cpu_node = PyMem_Calloc(ncpus, sizeof(int));
	m->dram = PyMem_Calloc((size_t)m->nnodes * m->nnodes + 1, sizeof(double));
	m->transfer = PyMem_Calloc((size_t)m->nnodes * m->nnodes + 1, sizeof(double));
	m->private = PyMem_Calloc(ncpus, sizeof(Table));
	m->shared = PyMem_Calloc(m->nnodes + 1, sizeof(Table));
	if (m->cpu_node == NULL || m->dram == NULL || m->transfer == NULL || m->private == NULL
	    || m->shared == NULL) {
		PyErr_NoMemory();
		return -1;
	}
	for (int c = 0; c < m->ncpus; c++) {
		long node = PyLong_AsLong(PyList_GET_ITEM(cpu_node, c));
		if (node == -1 && PyErr_Occurred())
			return -1;
		if (node < 0 || node >= m->nnodes) {
			PyErr_Format(PyExc_ValueError, "CPU %d is on node %ld, not one of the %d",
				     c, node, m->nnodes);
			return -1;
		}
		m->cpu_node[c] = (int)node;
	}
	if (float_table(dram, m->nnodes, m->dram) < 0
	    || float_table(transfer, m->nnodes, m->transfer) < 0)
		return -1;
	for (int c = 0; c < m->ncpus; c++)
		if (tab_init(&m->private[c]) < 0)
			return -1;
	for (int n = 0; n < m->nnodes; n++)
		if (tab_init(&m->shared[n]) < 0)
			return -1;
	if (tab_init(&m->lines) < 0)
		return -1;
	m->line_shift = line_shift;
	m->node_shift = node_shift;
	m->private_lines = private_lines;
	m->shared_lines = shared_lines;
	m->shared_hit = shared_hit;
	m->spin_lock_ns = spin_lock_ns;
	m->lock_history = lock_history;
	m->cost = Py_NewRef(cost);
	m->clock = Py_NewRef(clock);
	m->hits = Py_NewRef(hits);
	m->stats = Py_NewRef(stats);
	m->counts = Py_NewRef(counts);
	return 0;
}

static void cm_dealloc(PyObject *op)
{
	cm_release((CacheModel *)op);
	Py_TYPE(op)->tp_free(op);
}

/* HtabMap's costs and the scheduler's idle check in C (defined with the native tier's
 * charges, below) */
static PyObject *cm_htab_op_cost(PyObject *op, PyObject *const *args, Py_ssize_t nargs);
static PyObject *cm_htab_walk_cost(PyObject *op, PyObject *const *args, Py_ssize_t nargs);

static PyMethodDef cm_methods[] = {
	{"access", (PyCFunction)(void (*)(void))cm_access, METH_FASTCALL | METH_KEYWORDS,
	 "access(cpu, addr, write=False) -> float: Timing.access"},
	{"spin_lock", (PyCFunction)(void (*)(void))cm_spin_lock, METH_FASTCALL,
	 "spin_lock(cpu, lock): Timing.spin_lock"},
	{"charge", (PyCFunction)(void (*)(void))cm_charge, METH_FASTCALL,
	 "charge(cpu, event, n=1): Timing.charge"},
	{"spin_unlock", (PyCFunction)(void (*)(void))cm_spin_unlock, METH_FASTCALL,
	 "spin_unlock(cpu, lock): Timing.spin_unlock"},
	{"locked_access", (PyCFunction)(void (*)(void))cm_locked_access,
	 METH_FASTCALL | METH_KEYWORDS,
	 "locked_access(cpu, lock, addr, write=True): Timing.locked_access"},
	{"htab_op_cost", (PyCFunction)(void (*)(void))cm_htab_op_cost, METH_FASTCALL,
	 "htab_op_cost(bpf_map, bucket_size, cpu, event, key, hash): HtabMap._op_cost"},
	{"htab_walk_cost", (PyCFunction)(void (*)(void))cm_htab_walk_cost, METH_FASTCALL,
	 "htab_walk_cost(bpf_map, bucket_size, cpu, key, hash): HtabMap._walk_cost"},
	{"state", cm_state, METH_NOARGS,
	 "The caches, versions and owners, as Timing.cache_state gives them"},
	{NULL, NULL, 0, NULL},
};

PyTypeObject CacheModelType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pybpf._cache_model.CacheModel",
	.tp_doc = "The cache state of an emulated machine and its accesses (see Timing).",
	.tp_basicsize = sizeof(CacheModel),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = PyType_GenericNew,
	.tp_init = cm_init,
	.tp_dealloc = cm_dealloc,
	.tp_methods = cm_methods,
};

/* swap_dicts (timing.py): the virtual-time scheduler's switch of task-local state, each live
 * dict emptied into a new one (returned, in order) and refilled from its incoming twin. */
static PyObject *mod_swap_dicts(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 2 || !PyList_Check(args[0]) || !PyList_Check(args[1])) {
		PyErr_SetString(PyExc_TypeError, "swap_dicts(states, incoming): two lists of dicts");
		return NULL;
	}
	if (PyList_GET_SIZE(args[0]) != PyList_GET_SIZE(args[1])) {
		PyErr_SetString(PyExc_ValueError, "swap_dicts: as many incoming dicts as states");
		return NULL;
	}
	Py_ssize_t n = PyList_GET_SIZE(args[0]);
	PyObject *saved = PyList_New(n);
	if (saved == NULL)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *state = PyList_GET_ITEM(args[0], i);
		PyObject *incoming = PyList_GET_ITEM(args[1], i);
		if (!PyDict_Check(state) || !PyDict_Check(incoming)) {
			PyErr_SetString(PyExc_TypeError, "swap_dicts: the states are dicts");
			goto error;
		}
		PyObject *copy = PyDict_Copy(state);
		if (copy == NULL)
			goto error;
		PyList_SET_ITEM(saved, i, copy);
		PyDict_Clear(state);
		if (PyDict_Update(state, incoming) < 0)
			goto error;
	}
	return saved;
error:
	Py_DECREF(saved);
	return NULL;
}

/*
 * The native tier's charges (emulated/prog/native.py), called from machine code without the
 * GIL: what Python's lookup helper does around its lookup, in its order, or a helper's call.
 * ``run`` is the run's charging words: the Timing, its CacheModel, the CPU (an int), that
 * CPU's list of deferred work and the run (_Run), whose ``error`` takes what fails.
 * - CHARGE_SYNC: Timing.sync's first half, the scheduler's sync (it may hand the baton to
 *   another CPU's task and come back; not called where it would do nothing, which is checked
 *   here: sync_does_nothing); then NOT_CHARGED when deferred work waits on the CPU
 *   (Python's sync runs it, with the run's frames registered) and nothing else is done.
 * - CHARGE_ARRAY: array_cost, "array_map_lookup_elem", and with CHARGE_ACCESS the value's
 *   line at ``addr``.
 * - CHARGE_HTAB: HtabMap._op_cost of the ``key_size`` bytes at ``key`` in ``bpf_map``:
 *   "htab_map_lookup_elem", jhash per key byte, the bucket's line (``addr``: the size of
 *   struct bucket) and each element of its chain up to the key; by the map's HtabCore
 *   ``core`` where it has one (NULL: none).
 *   With CHARGE_REF, then an LRU map's bpf_lru_node_set_ref: the element's reference bit
 *   set where it was clear, and with CHARGE_REF_LINE that write charged to its line.
 * - CHARGE_HELPER: a helper's call (helpers.charged: "helper_call"), for one compiled inline;
 *   CHARGE_PROBE_READ: bpf_probe_read_user's, its own cost ("probe_read_user").
 * Returns CHARGED, NOT_CHARGED or CHARGE_FAILED (the exception in run.error).
 */
enum {
	CHARGE_SYNC = 1, CHARGE_ARRAY = 2, CHARGE_ACCESS = 4, CHARGE_HTAB = 8, CHARGE_HELPER = 16,
	CHARGE_REF = 32, CHARGE_REF_LINE = 64, CHARGE_PROBE_READ = 128
};
enum { NOT_CHARGED = 0, CHARGED = 1, CHARGE_FAILED = 2 };
enum { RUN_TIMING, RUN_MODEL, RUN_CPU, RUN_DEFERRED, RUN_SELF };

static PyObject *s_thirty_two;  /* getrandbits' argument */
static PyObject *s_helper_call, *s_probe_read_user, *s_scheduler, *s_sync, *s_deferred,
	*s_run_deferred, *s_error, *s_array_lookup, *s_htab_lookup, *s_jhash_byte,
	*s_hash_cached, *s_mask, *s_bucket_base, *s_buckets, *s_addr, *s_key, *s_table, *s_ref,
	*s_clock;

/* The scheduler's fields sync_does_nothing reads, at their slots */
enum { SCHED_THREAD_F, SCHED_HOLDER_F, SCHED_ACTIVE_F, SCHED_QUANTUM_F, SCHED_FIELDS };
static SlotField sched_fields[SCHED_FIELDS];

/* Whether VirtualTimeScheduler.sync(cpu) would do nothing now: its participants run as
 * greenlets of this thread, cpu holds the baton, and no other participant's clock (in
 * ``clock``, Timing.clock: a float per CPU) plus the quantum is below cpu's (so no other CPU
 * goes first). 1, 0 (call it), or -1 (an error). Without modeled time the clocks stand still
 * but for waits, so this is nearly always 1: the check, not the call, is what each
 * operation costs then. */
static int sync_does_nothing(PyObject *scheduler, PyObject *clock, int cpu)
{
	static const SlotFieldOf of[SCHED_FIELDS] = {
		[SCHED_THREAD_F] = {"VirtualTimeScheduler", "_greenlet_thread"},
		[SCHED_HOLDER_F] = {"VirtualTimeScheduler", "_holder"},
		[SCHED_ACTIVE_F] = {"VirtualTimeScheduler", "_active"},
		[SCHED_QUANTUM_F] = {"VirtualTimeScheduler", "quantum_ns"},
	};
	PyObject *thread = NULL, *holder = NULL, *active = NULL, *quantum = NULL;
	int rc = 0;
	if (slot_fields_bind(sched_fields, of, SCHED_FIELDS, "pybpf.emulated.machine.timing") < 0)
		return -1;
	if ((thread = slot_field_get(&sched_fields[SCHED_THREAD_F], scheduler)) == NULL
	    || (holder = slot_field_get(&sched_fields[SCHED_HOLDER_F], scheduler)) == NULL
	    || (active = slot_field_get(&sched_fields[SCHED_ACTIVE_F], scheduler)) == NULL
	    || (quantum = slot_field_get(&sched_fields[SCHED_QUANTUM_F], scheduler)) == NULL) {
		/* not a VirtualTimeScheduler: its sync is called */
		if (PyErr_ExceptionMatches(PyExc_AttributeError))
			PyErr_Clear();
		else
			rc = -1;
		goto out;
	}
	if (thread == Py_None || !PyLong_Check(holder) || PyLong_AsLong(holder) != cpu
	    || PyLong_AsUnsignedLong(thread) != PyThread_get_thread_ident() || !PyList_Check(active)
	    || !PyList_Check(clock) || cpu < 0 || cpu >= PyList_GET_SIZE(clock))
		goto out;
	Py_ssize_t ncpus = PyList_GET_SIZE(clock);
	double slack = PyFloat_AsDouble(quantum);
	double now = PyFloat_AsDouble(PyList_GET_ITEM(clock, cpu));
	if (PyErr_Occurred()) {
		rc = -1;
		goto out;
	}
	rc = 1;
	for (Py_ssize_t i = 0; rc == 1 && i < PyList_GET_SIZE(active); i++) {
		long other = PyLong_AsLong(PyList_GET_ITEM(active, i));
		if (other == -1 && PyErr_Occurred())
			rc = -1;
		else if (other < 0 || other >= ncpus)
			rc = 0;
		else if (other != cpu) {
			double then = PyFloat_AsDouble(PyList_GET_ITEM(clock, other));
			rc = then == -1.0 && PyErr_Occurred() ? -1 : now > then + slack ? 0 : 1;
		}
	}
out:
	Py_XDECREF(thread);
	Py_XDECREF(holder);
	Py_XDECREF(active);
	Py_XDECREF(quantum);
	return rc;
}

static long schedulers;  /* Timings with a scheduler attached (Timing.scheduler counts) */

/* The first half of Timing.sync: the scheduler's turn for cpu, unless it would do nothing
 * (none attached to any machine, or sync_does_nothing). The clocks are the model's (``m``)
 * or, without one, the Timing's own list; the scheduler is read from the Timing's instance
 * dict where it is given (``dict``), else as its attribute. */
static int scheduler_sync(PyObject *timing, PyObject *dict, CacheModel *m, PyObject *cpu_obj,
			  int cpu)
{
	if (schedulers == 0)
		return 0;
	PyObject *scheduler = dict != NULL ? Py_XNewRef(PyDict_GetItemWithError(dict, s_scheduler))
		: NULL;
	if (scheduler == NULL && (PyErr_Occurred()
				  || (scheduler = PyObject_GetAttr(timing, s_scheduler)) == NULL))
		return -1;
	PyObject *clock = NULL;
	int idle = 1;
	if (scheduler != Py_None) {
		clock = m != NULL ? Py_NewRef(m->clock) : PyObject_GetAttr(timing, s_clock);
		idle = clock == NULL ? -1 : sync_does_nothing(scheduler, clock, cpu);
	}
	PyObject *synced = idle < 0 ? NULL : idle ? Py_NewRef(Py_None)
		: PyObject_CallMethodOneArg(scheduler, s_sync, cpu_obj);
	Py_DECREF(scheduler);
	Py_XDECREF(clock);
	Py_XDECREF(synced);
	return synced == NULL ? -1 : 0;
}

int timing_ref_bind(TimingRef *t, PyObject *bpf_map)
{
	if ((t->timing = PyObject_GetAttrString(bpf_map, "timing")) == NULL
	    || (t->dict = PyObject_GenericGetDict(t->timing, NULL)) == NULL
	    || (t->deferred = PyObject_GetAttr(t->timing, s_deferred)) == NULL)
		return -1;
	if (!PyDict_CheckExact(t->dict) || !PyList_CheckExact(t->deferred)) {
		PyErr_SetString(PyExc_TypeError, "a map core's Timing has an instance dict and a "
				"list of deferred work per CPU (_deferred)");
		return -1;
	}
	return 0;
}

int timing_sync(const TimingRef *t, CacheModel *m, PyObject *cpu_obj, int cpu)
{
	if (scheduler_sync(t->timing, t->dict, m, cpu_obj, cpu) < 0)
		return -1;
	PyObject *heap = cpu < PyList_GET_SIZE(t->deferred) ? PyList_GET_ITEM(t->deferred, cpu)
		: NULL;
	if (heap == NULL || !PyList_Check(heap)) {
		PyErr_SetString(PyExc_TypeError, "Timing._deferred is a list of heaps per CPU");
		return -1;
	}
	if (PyList_GET_SIZE(heap)) {
		PyObject *ran = PyObject_CallMethodOneArg(t->timing, s_run_deferred, cpu_obj);
		if (ran == NULL)
			return -1;
		Py_DECREF(ran);
	}
	return 0;
}

/* Timing.charge(cpu, event, n) through the model's own method (none: nothing) */
int charge_n(PyObject *model, PyObject *cpu, PyObject *event, PyObject *n)
{
	if (model == NULL)
		return 0;
	PyObject *args[3] = {cpu, event, n};
	PyObject *done = cm_charge(model, args, 3);
	Py_XDECREF(done);
	return done == NULL ? -1 : 0;
}

static int charge_access(CacheModel *m, int cpu, PyObject *addr)
{
	uint64_t a;
	if (parse_addr(addr, &a) < 0)
		return -1;
	return model_access(m, cpu, a, 0) == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* htab_lru_map_lookup_elem's bpf_lru_node_set_ref of key's element (none: nothing), its
 * line written (charged) with ``line`` */
static int lru_set_ref(CacheModel *m, int cpu, PyObject *bpf_map, PyObject *key, int line)
{
	PyObject *table = PyObject_GetAttr(bpf_map, s_table), *bit = NULL, *addr = NULL;
	int rc = -1;
	if (table == NULL)
		return -1;
	PyObject *elem = PyDict_GetItemWithError(table, key);  /* borrowed */
	if (elem == NULL) {
		rc = PyErr_Occurred() ? -1 : 0;
		goto out;
	}
	Py_INCREF(elem);
	int set = (bit = elem_get(elem, ELEM_REF)) == NULL ? -1 : PyObject_IsTrue(bit);
	if (set == 0 && elem_set(elem, ELEM_REF, s_one) == 0) {
		uint64_t at;
		rc = !line ? 0 : (addr = elem_get(elem, ELEM_ADDR)) == NULL
			|| parse_addr(addr, &at) < 0
			|| (model_access(m, cpu, at, 1) == -1.0 && PyErr_Occurred()) ? -1 : 0;
	} else if (set > 0) {
		rc = 0;
	}
	Py_DECREF(elem);
out:
	Py_DECREF(table);
	Py_XDECREF(bit);
	Py_XDECREF(addr);
	return rc;
}

/* The accesses of a walk: the bucket's line at ``bucket``, then each element of ``chain``
 * (its list; NULL: an empty bucket) up to ``kb`` (every one when it is absent) */
int htab_chain_cost(CacheModel *m, int cpu, uint64_t bucket, PyObject *chain, PyObject *kb)
{
	if (model_access(m, cpu, bucket, 0) == -1.0 && PyErr_Occurred())
		return -1;
	if (chain == NULL)
		return 0;
	if (!PyList_Check(chain)) {
		PyErr_SetString(PyExc_TypeError, "a hash map's bucket is a list");
		return -1;
	}
	Py_INCREF(chain);
	int rc = 0;
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(chain); i++) {
		PyObject *elem = Py_NewRef(PyList_GET_ITEM(chain, i));
		PyObject *elem_key = NULL, *line = NULL;
		int same = -1;
		if ((line = elem_get(elem, ELEM_ADDR)) != NULL
		    && charge_access(m, cpu, line) == 0
		    && (elem_key = elem_get(elem, ELEM_KEY)) != NULL)
			same = PyObject_RichCompareBool(elem_key, kb, Py_EQ);
		Py_XDECREF(line);
		Py_XDECREF(elem_key);
		Py_DECREF(elem);
		if (same != 0) {  /* the key, or an error */
			rc = same < 0 ? -1 : 0;
			break;
		}
	}
	Py_DECREF(chain);
	return rc;
}

/* HtabMap._walk_cost(cpu, key, hash): htab_chain_cost of the bucket at bucket_base +
 * (hash & mask) * bucket_size */
static int htab_walk_cost(CacheModel *m, int cpu, PyObject *bpf_map, PyObject *kb,
			  PyObject *hash, uint64_t bucket_size)
{
	PyObject *mask = NULL, *index = NULL, *base = NULL, *buckets = NULL;
	int rc = -1;
	uint64_t first, at;
	if ((mask = PyObject_GetAttr(bpf_map, s_mask)) == NULL
	    || (index = PyNumber_And(hash, mask)) == NULL
	    || (base = PyObject_GetAttr(bpf_map, s_bucket_base)) == NULL
	    || parse_addr(base, &first) < 0 || parse_addr(index, &at) < 0
	    || (buckets = PyObject_GetAttr(bpf_map, s_buckets)) == NULL)
		goto out;
	if (!PyDict_Check(buckets)) {
		PyErr_SetString(PyExc_TypeError, "a hash map's buckets are a dict");
		goto out;
	}
	PyObject *chain = PyDict_GetItemWithError(buckets, index);  /* borrowed */
	if (chain == NULL && PyErr_Occurred())
		goto out;
	rc = htab_chain_cost(m, cpu, first + at * bucket_size, chain, kb);
out:
	Py_XDECREF(mask);
	Py_XDECREF(index);
	Py_XDECREF(base);
	Py_XDECREF(buckets);
	return rc;
}

/* HtabMap._op_cost(cpu, event, key, hash): ``event``, jhash per key byte, then the walk */
static int htab_op_cost(CacheModel *m, PyObject *cpu_obj, int cpu, PyObject *event,
			PyObject *bpf_map, PyObject *kb, PyObject *hash, uint64_t bucket_size)
{
	Py_ssize_t key_size = PyObject_Size(kb);
	PyObject *size = key_size < 0 ? NULL : PyLong_FromSsize_t(key_size);
	int rc = size == NULL || charge_n((PyObject *)m, cpu_obj, event, s_one) < 0
		|| charge_n((PyObject *)m, cpu_obj, s_jhash_byte, size) < 0
		|| htab_walk_cost(m, cpu, bpf_map, kb, hash, bucket_size) < 0 ? -1 : 0;
	Py_XDECREF(size);
	return rc;
}

/* The native tier's lookup: HtabMap._op_cost(cpu, "htab_map_lookup_elem", key, hash) of the
 * ``key_size`` bytes at ``key``, and with ``ref`` an LRU map's lru_set_ref */
static int htab_lookup_cost(PyObject *const *run, int cpu, PyObject *bpf_map, PyObject *core,
			    const char *key, int64_t key_size, uint64_t bucket_size, int64_t ref)
{
	CacheModel *m = (CacheModel *)run[RUN_MODEL];
	PyObject *kb = NULL, *hash_fn = NULL, *hash = NULL;
	int rc = -1;
	if (core != NULL) {  /* the map's HtabCore: its hash and walk without Python */
		if (htab_core_lookup_cost(core, run[RUN_CPU], cpu, key, &kb) < 0)
			goto out;
	} else if ((kb = PyBytes_FromStringAndSize(key, key_size)) == NULL
		   || (hash_fn = PyObject_GetAttr(bpf_map, s_hash_cached)) == NULL
		   || (hash = PyObject_CallOneArg(hash_fn, kb)) == NULL
		   || htab_op_cost(m, run[RUN_CPU], cpu, s_htab_lookup, bpf_map, kb, hash,
				   bucket_size) < 0) {
		goto out;
	}
	rc = ref & CHARGE_REF ? lru_set_ref(m, cpu, bpf_map, kb, (ref & CHARGE_REF_LINE) != 0) : 0;
out:
	Py_XDECREF(kb);
	Py_XDECREF(hash_fn);
	Py_XDECREF(hash);
	return rc;
}

/* htab_op_cost(bpf_map, bucket_size, cpu, event, key, hash): HtabMap._op_cost in C */
static PyObject *cm_htab_op_cost(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	CacheModel *m = (CacheModel *)op;
	uint64_t bucket_size;
	int cpu;
	if (nargs != 6) {
		PyErr_SetString(PyExc_TypeError,
				"htab_op_cost(bpf_map, bucket_size, cpu, event, key, hash)");
		return NULL;
	}
	if (parse_addr(args[1], &bucket_size) < 0 || parse_cpu(m, args[2], &cpu) < 0
	    || htab_op_cost(m, args[2], cpu, args[3], args[0], args[4], args[5],
			    bucket_size) < 0)
		return NULL;
	Py_RETURN_NONE;
}

/* htab_walk_cost(bpf_map, bucket_size, cpu, key, hash): HtabMap._walk_cost in C */
static PyObject *cm_htab_walk_cost(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	CacheModel *m = (CacheModel *)op;
	uint64_t bucket_size;
	int cpu;
	if (nargs != 5) {
		PyErr_SetString(PyExc_TypeError, "htab_walk_cost(bpf_map, bucket_size, cpu, key, hash)");
		return NULL;
	}
	if (parse_addr(args[1], &bucket_size) < 0 || parse_cpu(m, args[2], &cpu) < 0
	    || htab_walk_cost(m, cpu, args[0], args[3], args[4], bucket_size) < 0)
		return NULL;
	Py_RETURN_NONE;
}

/* count_schedulers(delta): a Timing's scheduler attached (1) or detached (-1) */
static PyObject *mod_count_schedulers(PyObject *module, PyObject *delta)
{
	long n = PyLong_AsLong(delta);
	if (n == -1 && PyErr_Occurred())
		return NULL;
	if (schedulers + n < 0) {
		PyErr_SetString(PyExc_ValueError, "more schedulers detached than attached");
		return NULL;
	}
	schedulers += n;
	Py_RETURN_NONE;
}

/* sync_idle(scheduler, clock, cpu): whether scheduler.sync(cpu) would do nothing now, the
 * clocks being ``clock`` (Timing.sync then leaves it uncalled); False where it cannot tell */
static PyObject *mod_sync_idle(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
	long cpu;
	if (nargs != 3) {
		PyErr_SetString(PyExc_TypeError, "sync_idle(scheduler, clock, cpu)");
		return NULL;
	}
	if ((cpu = PyLong_AsLong(args[2])) == -1 && PyErr_Occurred())
		return NULL;
	if (cpu < 0 || cpu > INT_MAX)
		Py_RETURN_FALSE;
	int idle = sync_does_nothing(args[0], args[1], (int)cpu);
	if (idle < 0)
		return NULL;
	return PyBool_FromLong(idle);
}

void native_keep_error(PyObject *run)
{
	PyObject *type, *value, *traceback;
	PyErr_Fetch(&type, &value, &traceback);
	PyErr_NormalizeException(&type, &value, &traceback);
	if (traceback != NULL && value != NULL)
		PyException_SetTraceback(value, traceback);
	if (value == NULL || PyObject_SetAttr(run, s_error, value) < 0)
		PyErr_WriteUnraisable(run);
	Py_XDECREF(type);
	Py_XDECREF(value);
	Py_XDECREF(traceback);
}

int64_t pybpf_native_charge(PyObject *const *run, int64_t what, uint64_t addr,
			    PyObject *bpf_map, const char *key, int64_t key_size, PyObject *core)
{
	HelperGil gil = helper_gil_take();
	int64_t result = CHARGED;
	CacheModel *m = (CacheModel *)run[RUN_MODEL];
	int cpu;
	if (parse_cpu(m, run[RUN_CPU], &cpu) < 0)
		goto fail;
	if (what & CHARGE_SYNC) {
		if (scheduler_sync(run[RUN_TIMING], NULL, m, run[RUN_CPU], cpu) < 0)
			goto fail;
		if (PyList_GET_SIZE(run[RUN_DEFERRED])) {
			result = NOT_CHARGED;
			goto out;
		}
	}
	if (what & CHARGE_ARRAY) {
		if (charge_n((PyObject *)m, run[RUN_CPU], s_array_lookup, s_one) < 0)
			goto fail;
		if (what & CHARGE_ACCESS && model_access(m, cpu, addr, 0) == -1.0
		    && PyErr_Occurred())
			goto fail;
	}
	if (what & CHARGE_HTAB
	    && htab_lookup_cost(run, cpu, bpf_map, core, key, key_size, addr, what) < 0)
		goto fail;
	if (what & CHARGE_HELPER && charge_n((PyObject *)m, run[RUN_CPU], s_helper_call, s_one) < 0)
		goto fail;
	if (what & CHARGE_PROBE_READ
	    && charge_n((PyObject *)m, run[RUN_CPU], s_probe_read_user, s_one) < 0)
		goto fail;
	goto out;
fail:
	native_keep_error(run[RUN_SELF]);
	result = CHARGE_FAILED;
out:
	helper_gil_give(gil);
	return result;
}

/* Python's random.Random in place: Modules/_randommodule.c's RandomObject, a Mersenne Twister
 * (MT19937) whose next 32-bit word is what getrandbits(32) answers. Read here where
 * mt_verify found the struct as it is laid out below (compared word for word with getstate()
 * and 1300 words with getrandbits(32) across a regeneration), so the generator's sequence is
 * the reference tiers' one; else (another Python, a subclass's own getrandbits) the method
 * is called. */
#define MT_N 624
#define MT_M 397

typedef struct {
	PyObject_HEAD
	int index;
	uint32_t state[MT_N];
} MTRandom;

/* the C function of the getrandbits whose object is an MTRandom; NULL: call the method */
static PyCFunction mt_getrandbits;
static int mt_verified;

static uint32_t mt_next(MTRandom *r)
{
	static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
	uint32_t *mt = r->state, y;
	if (r->index >= MT_N) {
		int k;
		for (k = 0; k < MT_N - MT_M; k++) {
			y = (mt[k] & 0x80000000U) | (mt[k + 1] & 0x7fffffffU);
			mt[k] = mt[k + MT_M] ^ (y >> 1) ^ mag01[y & 1];
		}
		for (; k < MT_N - 1; k++) {
			y = (mt[k] & 0x80000000U) | (mt[k + 1] & 0x7fffffffU);
			mt[k] = mt[k + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 1];
		}
		y = (mt[MT_N - 1] & 0x80000000U) | (mt[0] & 0x7fffffffU);
		mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 1];
		r->index = 0;
	}
	y = mt[r->index++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680U;
	y ^= (y << 15) & 0xefc60000U;
	y ^= y >> 18;
	return y;
}

/* 1 where ``r``'s getstate() is the MTRandom view's words and index, 0 where not, -1 with an
 * exception */
static int mt_state_matches(PyObject *r)
{
	PyObject *state = PyObject_CallMethod(r, "getstate", NULL);
	if (state == NULL)
		return -1;
	PyObject *words = PyTuple_Check(state) && PyTuple_GET_SIZE(state) == 3
		? PyTuple_GET_ITEM(state, 1) : NULL;
	int same = words != NULL && PyTuple_Check(words) && PyTuple_GET_SIZE(words) == MT_N + 1
		&& Py_TYPE(r)->tp_basicsize >= (Py_ssize_t)sizeof(MTRandom);
	const MTRandom *view = (const MTRandom *)r;
	for (Py_ssize_t i = 0; same && i <= MT_N; i++) {
		unsigned long word = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(words, i));
		if (PyErr_Occurred()) {
			Py_DECREF(state);
			return -1;
		}
		same = word == (i < MT_N ? view->state[i] : (unsigned long)view->index);
	}
	Py_DECREF(state);
	return same;
}

/* mt_getrandbits set where random.Random is an MTRandom whose words mt_next steps as
 * getrandbits(32) does: 0, or -1 with an exception */
static int mt_verify(void)
{
	mt_verified = 1;
	PyObject *module = PyImport_ImportModule("random");
	PyObject *ours = module == NULL ? NULL : PyObject_CallMethod(module, "Random", "i", 2017);
	PyObject *theirs = ours == NULL ? NULL : PyObject_CallMethod(module, "Random", "i", 2017);
	PyObject *bits = theirs == NULL ? NULL : PyObject_GetAttrString(theirs, "getrandbits");
	int rc = -1, same = bits != NULL && PyCFunction_Check(bits)
		&& PyCFunction_GET_SELF(bits) == theirs ? mt_state_matches(ours) : 0;
	for (int i = 0; same > 0 && i < 1300; i++) {
		PyObject *word = PyObject_CallFunction(bits, "i", 32);
		unsigned long expected = word == NULL ? 0 : PyLong_AsUnsignedLong(word);
		Py_XDECREF(word);
		if (PyErr_Occurred())
			goto out;
		same = mt_next((MTRandom *)ours) == expected;
	}
	if (same > 0)
		same = mt_state_matches(ours);
	if (same < 0)
		goto out;
	if (same)
		mt_getrandbits = PyCFunction_GET_FUNCTION(bits);
	rc = 0;
out:
	Py_XDECREF(module);
	Py_XDECREF(ours);
	Py_XDECREF(theirs);
	Py_XDECREF(bits);
	return rc;
}

/* bpf_get_prandom_u32 from the native tier's machine code: ``bits`` is the bound getrandbits
 * of the run's CPU's generator (Machine.prandom_source; NULL: a run without a machine, 0),
 * called for 32 bits as Machine.prandom_u32 calls it (stepped in place where it is
 * random.Random's own). Where it raised, the error is kept for the run and *status set to
 * ``raised``. */
uint64_t pybpf_native_prandom_u32(uint64_t *status, uint64_t raised, PyObject *run,
				  PyObject *bits)
{
	if (bits == NULL)
		return 0;
	HelperGil gil = helper_gil_take();
	uint64_t r0 = 0;
	if (!mt_verified && mt_verify() < 0)
		PyErr_Clear();  /* not verified: the method is called */
	if (mt_getrandbits != NULL && PyCFunction_Check(bits)
	    && PyCFunction_GET_FUNCTION(bits) == mt_getrandbits) {
		r0 = mt_next((MTRandom *)PyCFunction_GET_SELF(bits));
	} else {
		PyObject *word = PyObject_Vectorcall(bits, &s_thirty_two, 1, NULL);
		r0 = word == NULL ? 0 : PyLong_AsUnsignedLongLongMask(word);
		Py_XDECREF(word);
	}
	if (PyErr_Occurred()) {
		native_keep_error(run);
		*status = raised;
	}
	helper_gil_give(gil);
	return r0 & 0xffffffffu;
}

static PyMethodDef module_methods[] = {
	{"swap_dicts", (PyCFunction)(void (*)(void))mod_swap_dicts, METH_FASTCALL,
	 "swap_dicts(states, incoming) -> saved: timing.swap_dicts"},
	{"count_schedulers", mod_count_schedulers, METH_O,
	 "count_schedulers(delta): Timing.scheduler's count of the attached schedulers"},
	{"sync_idle", (PyCFunction)(void (*)(void))mod_sync_idle, METH_FASTCALL,
	 "sync_idle(scheduler, clock, cpu): whether scheduler.sync(cpu) would do nothing now"},
	{"probe_read_user", (PyCFunction)(void (*)(void))probe_read_user, METH_FASTCALL,
	 "probe_read_user(rs, r1, r2, r3, r4, r5) -> r0: bpf_trace.bpf_probe_read_user"},
	{"trace_call_bpf", (PyCFunction)(void (*)(void))trace_call_bpf, METH_FASTCALL,
	 "trace_call_bpf(links, record, proto, ctx_region, run_prog, timing, cpu) -> r0s: "
	 "progs._fire's runs"},
	{"fire_tracepoint", (PyCFunction)(void (*)(void))fire_tracepoint, METH_FASTCALL,
	 "fire_tracepoint(system, key, ctx) -> r0s: progs.ProgramsMixin._fire"},
	{"enter_syscall", (PyCFunction)(void (*)(void))enter_syscall, METH_FASTCALL,
	 "enter_syscall(system, key, ctx, entry) -> r0s: progs.ProgramsMixin.enter_syscall "
	 "once it has the key and the entry's event"},
	{"lpm_trie_walk", (PyCFunction)(void (*)(void))lpm_trie_walk, METH_FASTCALL,
	 "lpm_trie_walk(root, key, data_size) -> node or None: lpm_trie.trie_walk"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef cache_model_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "pybpf._cache_model",
	.m_doc = "Optional C twin of the emulated machine's cache model (Timing.access) and of "
		 "the virtual-time scheduler's switch of task-local state (swap_dicts); it also "
		 "charges for the native tier's machine code (pybpf_native_charge) and runs a hash "
		 "map's lookup, update and delete with their charges (HtabCore), with the element "
		 "memory of bpf_mem_alloc and the common LRU, and an LPM trie's lookup walk "
		 "(lpm_trie_walk).",
	.m_size = -1,
	.m_methods = module_methods,
};

int intern(PyObject **name, const char *text)
{
	*name = PyUnicode_InternFromString(text);
	return *name == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__cache_model(void)
{
	if (intern(&s_shared_hit, "shared_hit") < 0 || intern(&s_dram_local, "dram_local") < 0
	    || intern(&s_dram_remote, "dram_remote") < 0
	    || intern(&s_transfer_local, "transfer_local") < 0
	    || intern(&s_transfer_remote, "transfer_remote") < 0
	    || intern(&s_lock_wait, "lock_wait") < 0 || intern(&s_spin_lock, "spin_lock") < 0
	    || intern(&s_helper_call, "helper_call") < 0
	    || intern(&s_probe_read_user, "probe_read_user") < 0
	    || intern(&s_scheduler, "_scheduler") < 0 || intern(&s_sync, "sync") < 0
	    || intern(&s_clock, "clock") < 0
	    || intern(&s_deferred, "_deferred") < 0 || intern(&s_run_deferred, "run_deferred") < 0
	    || intern(&s_error, "error") < 0
	    || intern(&s_array_lookup, "array_map_lookup_elem") < 0
	    || intern(&s_htab_lookup, "htab_map_lookup_elem") < 0
	    || intern(&s_jhash_byte, "jhash_byte") < 0
	    || intern(&s_hash_cached, "_hash_cached") < 0 || intern(&s_mask, "mask") < 0
	    || intern(&s_bucket_base, "bucket_base") < 0 || intern(&s_buckets, "buckets") < 0
	    || intern(&s_addr, "addr") < 0 || intern(&s_key, "key") < 0
	    || intern(&s_table, "table") < 0 || intern(&s_ref, "ref") < 0)
		return NULL;
	if ((s_one == NULL && (s_one = PyLong_FromLong(1)) == NULL)
	    || (s_zero == NULL && (s_zero = PyLong_FromLong(0)) == NULL)
	    || (s_thirty_two == NULL && (s_thirty_two = PyLong_FromLong(32)) == NULL))
		return NULL;
	if (PyType_Ready(&CacheModelType) < 0 || PyType_Ready(&LockType) < 0
	    || htab_core_ready() < 0 || host_lock_ready() < 0 || lpm_core_ready() < 0
	    || bpf_trace_ready() < 0 || native_entry_ready() < 0)
		return NULL;
	PyObject *module = PyModule_Create(&cache_model_module);
	if (module == NULL)
		return NULL;
	if (PyModule_AddObjectRef(module, "CacheModel", (PyObject *)&CacheModelType) < 0
	    || PyModule_AddObjectRef(module, "SpinLock", (PyObject *)&LockType) < 0
	    || PyModule_AddObjectRef(module, "HtabCore", (PyObject *)&HtabCoreType) < 0
	    || PyModule_AddObjectRef(module, "OpsHelpers", (PyObject *)&OpsHelpersType) < 0
	    || PyModule_AddObjectRef(module, "HostLock", (PyObject *)&HostLockType) < 0
	    || PyModule_AddObjectRef(module, "NativeEntry", (PyObject *)&NativeEntryType) < 0
	    || PyModule_AddObjectRef(module, "LpmCore", (PyObject *)&LpmCoreType) < 0) {
		Py_DECREF(module);
		return NULL;
	}
	/* EmulatedSystem.enter_syscall, a method: a C function called with the system first */
	static PyMethodDef enter_syscall_def = {
		"enter_syscall", (PyCFunction)(void (*)(void))enter_syscall_method,
		METH_FASTCALL | METH_KEYWORDS,
		"enter_syscall(syscall, ctx=b'') -> r0s: a task on the current CPU makes "
		"``syscall``: a modeled operation begins, the entry costs syscall_entry "
		"(syscall_connect for connect), and tracepoint syscalls/sys_enter_<syscall> fires "
		"with the record ``ctx`` (progs.py's ProgramsMixin.enter_syscall, in C)"};
	PyObject *function = PyCFunction_New(&enter_syscall_def, module);
	PyObject *method = function == NULL ? NULL : PyInstanceMethod_New(function);
	Py_XDECREF(function);
	if (method == NULL || PyModule_AddObject(module, "enter_syscall_method", method) < 0) {
		Py_XDECREF(method);
		Py_DECREF(module);
		return NULL;
	}
	return module;
}
