/*
 * unit_alloc and unit_free of bpf_mem_alloc (kernel/bpf/memalloc.c) in C, for the hash map's
 * hot path (_hashtab.c): BpfMemAlloc.alloc and BpfMemAlloc.free (pybpf/emulated/machine/
 * memalloc.py, the reference) done on its own Python objects, with the same locks taken and
 * the same charges made in the same order. The irq_work the watermarks queue (the refill
 * below the low mark, free_bulk above the high one) is the Python methods', called where
 * alloc and free call them. The 2022 allocator (free_through_rcu) and the kmalloc design
 * stay Python.
 */
#include "_cache_model.h"

static PyObject *s_caches, *s_counters, *s_count_lock, *s_low, *s_high, *s_refill, *s_trim,
	*s_design, *s_mem_cache_event, *s_one;

int mem_alloc_ready(void)
{
	if (intern(&s_caches, "caches") < 0 || intern(&s_counters, "counters") < 0
	    || intern(&s_count_lock, "_count_lock") < 0 || intern(&s_low, "low") < 0
	    || intern(&s_high, "high") < 0
	    || intern(&s_refill, "refill") < 0 || intern(&s_trim, "trim") < 0
	    || intern(&s_design, "design") < 0
	    || intern(&s_mem_cache_event, "bpf_mem_cache") < 0)
		return -1;
	return (s_one = PyLong_FromLong(1)) == NULL ? -1 : 0;
}

/* The fields unit_alloc and unit_free read on every call, at their slots: a cache's free list
 * and lock; bound by the first map of this allocator's design */
enum { CACHE_FREE_F, CACHE_LOCK_F, MEM_ALLOC_FIELDS };
static SlotField fields[MEM_ALLOC_FIELDS];

static int bind_fields(void)
{
	static const SlotFieldOf of[MEM_ALLOC_FIELDS] = {
		[CACHE_FREE_F] = {"_Cache", "free"}, [CACHE_LOCK_F] = {"_Cache", "lock"},
	};
	return slot_fields_bind(fields, of, MEM_ALLOC_FIELDS, "pybpf.emulated.machine.memalloc");
}

/* The counters unit_alloc and unit_free count, in MemAlloc.count_at's order */
enum { ALLOC_CALLS, ALLOC_FAILURES, FREE_CALLS, CACHE_HITS };
static const char *const COUNTED[] = {"alloc_calls", "alloc_failures", "free_calls",
				      "cache_hits"};

int mem_alloc_bind(MemAlloc *a, PyObject *ma)
{
	if (bind_fields() < 0)
		return -1;
	PyObject *design = PyObject_GetAttr(ma, s_design), *low = NULL, *high = NULL;
	PyObject *counters = NULL;
	int rc = -1;
	if (design == NULL)
		return -1;
	if (!PyUnicode_Check(design) || PyUnicode_CompareWithASCIIString(design, "bpf_mem_alloc")) {
		Py_DECREF(design);
		return 0;
	}
	if ((a->caches = PyObject_GetAttr(ma, s_caches)) == NULL
	    || (counters = PyObject_GetAttr(ma, s_counters)) == NULL
	    || counts_bind(&a->counts, counters, COUNTED, a->count_at, 4) < 0
	    || (a->count_lock = PyObject_GetAttr(ma, s_count_lock)) == NULL
	    || (low = PyObject_GetAttr(ma, s_low)) == NULL
	    || (high = PyObject_GetAttr(ma, s_high)) == NULL
	    || (a->low = PyLong_AsSsize_t(low)) == -1 || (a->high = PyLong_AsSsize_t(high)) == -1)
		goto out;
	if (!PyList_CheckExact(a->caches)) {
		PyErr_SetString(PyExc_TypeError, "BpfMemAlloc.caches is a list, one cache per CPU");
		goto out;
	}
	a->ma = Py_NewRef(ma);
	rc = 1;
out:
	if (rc < 0)
		mem_alloc_clear(a);
	Py_DECREF(design);
	Py_XDECREF(counters);
	Py_XDECREF(low);
	Py_XDECREF(high);
	return rc;
}

int mem_alloc_traverse(MemAlloc *a, visitproc visit, void *arg)
{
	Py_VISIT(a->ma);
	Py_VISIT(a->caches);
	Py_VISIT(a->count_lock);
	return 0;
}

void mem_alloc_clear(MemAlloc *a)
{
	Py_CLEAR(a->ma);
	Py_CLEAR(a->caches);
	counts_release(&a->counts);
	Py_CLEAR(a->count_lock);
}

/* The cache of ``cpu`` and its free list and lock (new references), or -1 */
static int cpu_cache(MemAlloc *a, int cpu, PyObject **cache, PyObject **free, PyObject **lock)
{
	if (cpu >= PyList_GET_SIZE(a->caches)) {
		PyErr_Format(PyExc_IndexError, "CPU %d has no bpf_mem_cache", cpu);
		return -1;
	}
	*cache = Py_NewRef(PyList_GET_ITEM(a->caches, cpu));
	if ((*free = slot_field_get(&fields[CACHE_FREE_F], *cache)) == NULL
	    || (*lock = slot_field_get(&fields[CACHE_LOCK_F], *cache)) == NULL)
		return -1;
	if (!PyList_CheckExact(*free)) {
		PyErr_SetString(PyExc_TypeError, "a bpf_mem_cache's free list is a list");
		return -1;
	}
	return 0;
}

/* Under the allocator's count lock (Python's counting takes it too), the counter ``counted``
 * += 1, and the counter ``also`` (-1: none) */
static int count(MemAlloc *a, int counted, int also)
{
	if (host_lock_acquire(a->count_lock) < 0)
		return -1;
	counts_add(&a->counts, a->count_at[counted], 1);
	if (also >= 0)
		counts_add(&a->counts, a->count_at[also], 1);
	return lock_release(a->count_lock, 0);
}

PyObject *unit_alloc(MemAlloc *a, PyObject *model, PyObject *cpu_obj, int cpu)
{
	PyObject *cache = NULL, *free = NULL, *lock = NULL, *obj = NULL, *result = NULL;
	Py_ssize_t n, left;
	if (cpu_cache(a, cpu, &cache, &free, &lock) < 0 || host_lock_acquire(lock) < 0)
		goto out;
	n = PyList_GET_SIZE(free);
	obj = Py_NewRef(n ? PyList_GET_ITEM(free, n - 1) : Py_None);
	int rc = n ? PyList_SetSlice(free, n - 1, n, NULL) : 0;
	left = PyList_GET_SIZE(free);
	if (lock_release(lock, rc) < 0
	    || charge_n(model, cpu_obj, s_mem_cache_event, s_one) < 0
	    || count(a, ALLOC_CALLS, obj != Py_None ? CACHE_HITS : ALLOC_FAILURES) < 0
	    || (obj != Py_None && write_line(model, obj, cpu) < 0))  /* llist_del_first */
		goto out;
	if (left < a->low) {
		PyObject *done = PyObject_CallMethodOneArg(a->ma, s_refill, cache);
		if (done == NULL)
			goto out;
		Py_DECREF(done);
	}
	result = Py_NewRef(obj);
out:
	Py_XDECREF(cache);
	Py_XDECREF(free);
	Py_XDECREF(lock);
	Py_XDECREF(obj);
	return result;
}

int unit_free(MemAlloc *a, PyObject *model, PyObject *obj, PyObject *cpu_obj, int cpu)
{
	PyObject *cache = NULL, *free = NULL, *lock = NULL;
	int rc = -1, over;
	if (count(a, FREE_CALLS, -1) < 0 || cpu_cache(a, cpu, &cache, &free, &lock) < 0
	    || host_lock_acquire(lock) < 0)
		goto out;
	int appended = PyList_Append(free, obj);
	over = PyList_GET_SIZE(free) > a->high;
	if (lock_release(lock, appended) < 0
	    || charge_n(model, cpu_obj, s_mem_cache_event, s_one) < 0
	    || write_line(model, obj, cpu) < 0)  /* llist_add */
		goto out;
	if (over) {
		PyObject *done = PyObject_CallMethodOneArg(a->ma, s_trim, cache);
		if (done == NULL)
			goto out;
		Py_DECREF(done);
	}
	rc = 0;
out:
	Py_XDECREF(cache);
	Py_XDECREF(free);
	Py_XDECREF(lock);
	return rc;
}
