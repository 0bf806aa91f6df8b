/*
 * HtabCore: the hot path of the emulated hash map (pybpf/emulated/maps/hashtab.py, after
 * kernel/bpf/hashtab.c) in C, with its modeled time charged straight to the C cache model:
 * the lookup, update and delete a program makes on a HASH, PERCPU_HASH or LRU_HASH map
 * (LRU_PERCPU_HASH and maps of maps stay in Python), and the map helpers around them, with
 * the element memory they take and give back: a NO_PREALLOC map's bpf_mem_alloc
 * (_memalloc.c) and an LRU map's common LRU (_bpf_lru_list.c). HtabMap makes one per map
 * when the C model runs, and these become the map's own methods.
 *
 * The Python code is the reference. This does its steps on its Python objects (the key table,
 * the buckets and their sorted index of non-empty ones, the live value table, the per-CPU
 * free lists and spare elements, the access counts), takes the same host locks, and charges
 * the same events in the same order, so the map, its statistics and every clock, count and
 * cache are the same after any sequence of operations (tests/emulated/machine/
 * test_cache_model.py runs both). What is not the hot case calls the Python that does it: an
 * update with other flags or a value with special fields (the reference method, whole), an
 * error (the method that raises it), a free list to refill or steal from, an allocator of
 * another design, a per-CPU LRU.
 */
#include "_cache_model.h"
#include <structmember.h>
#include "_int_cache.h"
#include "_jhash.h"

#define BPF_NOEXIST 1
#define BPF_EXIST 2

typedef struct {
	PyObject_HEAD
	PyObject *map;          /* the HtabMap, for what falls back to Python */
	PyObject *update_elem;  /* the map's Python map_update_elem, the reference */
	PyObject *delete_elem;  /* the map's Python map_delete_elem, the reference */
	TimingRef timing;       /* the map's Timing */
	PyObject *model;        /* its CacheModel, or NULL without modeled time: nothing charged */
	int ncpus;              /* the machine's CPUs */
	PyObject *kernel_error; /* pybpf.errors.KernelError: a helper returns its errno */
	PyObject *table;        /* key -> element */
	PyObject *values;       /* key -> live value, or NULL (per-CPU maps have none) */
	PyObject *buckets;      /* bucket index -> list of elements, newest first */
	PyObject *nonempty;     /* a byte per bucket, 1 where it has elements (a bytearray) */
	PyObject *stripes;      /* the host locks, one per stripe of buckets */
	PyObject *bucket_locks; /* bucket index -> its modeled spinlock */
	PyObject *hash_fn;      /* HtabMap._hash_cached, for a key that is not bytes of key_size */
	uint32_t hashrnd;       /* its seed */
	PyObject *current;      /* machine.current: its .cpu is the running CPU */
	AccessCounts access;    /* the map's AccessStats */
	PyObject *freelist;     /* the PcpuFreelist of a preallocated map, or NULL */
	Counts freelist_counts; /* its tally */
	Py_ssize_t freelist_at[2];  /* where its pops and pushes are (FREELIST_COUNTED) */
	PyObject *free_lists;   /* its lists, one per CPU */
	PyObject *free_locks;   /* its modeled locks, one per CPU */
	PyObject *extra_elems;  /* per CPU, the spares a replacement takes (empty: none) */
	PyObject *key_size;     /* an int, for jhash's charge */
	Py_ssize_t key_bytes;   /* the same */
	uint64_t mask, stripe_mask, bucket_base, bucket_size;
	int prealloc;
	int percpu;             /* a PERCPU_HASH map: values in place, a slot per CPU */
	int lru;                /* an LRU_HASH map: its nodes come from the LRU */
	PyObject *lru_list;     /* its BpfLru, or NULL */
	Py_ssize_t value_size;
	PyObject *zeros;        /* a per-CPU slot's zeros */
	PyObject *last_key;     /* the key bytes of the last helper call, or NULL */
	MemAlloc ma;            /* a NO_PREALLOC map's allocator, where it runs in C */
	Lru lru_lists;          /* an LRU map's lists, where they run in C */
	/* the map's value has special fields (a bpf_spin_lock, a bpf_timer): the Python ops do
	 * its updates and deletes. BTF gives them after the map is made (map_check_btf), and
	 * HtabMap.set_special_fields sets this member then. */
	char special_fields;
	PyObject *count_lock;   /* with ma: the lock of the map's element count, */
	Counts elem_counts;     /* the map's tally, where that count is (at count_at), */
	Py_ssize_t count_at;
	long long max_entries;  /* its limit, */
	PyObject *count_addr;   /* and its line where it is an atomic_t (else NULL) */
} HtabCore;

static PyObject *s_cpu, *s_hash, *s_key, *s_value, *s_addr, *s_node,
	*s_update_event, *s_delete_event, *s_jhash_byte, *s_bucket_lock,
	*s_check_flags, *s_alloc_htab_elem, *s_new_elem_on_home,
	*s_retire_replaced, *s_release_elem, *s_key_not_found, *s_lookup_event,
	*s_errno, *s_ref, *s_lru_update_event, *s_prealloc_lru_pop, *s_no_free_node,
	*s_push_free, *s_put_fd_value, *s_region_of, *s_one, *s_false, *s_atomic, *s_alloc_failed,
	*s_core;

static PyObject *attr(PyObject *obj, const char *name)
{
	return PyObject_GetAttrString(obj, name);
}

/* HtabElem's fields (its __slots__ and LruNode's), at their offsets in the object: the
 * attribute protocol (type lookup, descriptor) costs more than the rest of some operations.
 * Bound to the classes once the first HtabCore is made; anything else goes by attribute. */
static PyTypeObject *elem_type, *head_type;
static Py_ssize_t elem_offset[ELEM_FIELDS];
static PyObject *s_prev, *s_next, *s_type;
static PyObject **const elem_names[ELEM_FIELDS] = {
	[ELEM_KEY] = &s_key, [ELEM_VALUE] = &s_value, [ELEM_HASH] = &s_hash,
	[ELEM_NODE] = &s_node, [ELEM_PREV] = &s_prev, [ELEM_NEXT] = &s_next,
	[ELEM_TYPE] = &s_type, [ELEM_REF] = &s_ref, [ELEM_CPU] = &s_cpu, [ELEM_ADDR] = &s_addr,
};

PyObject *node_class(const char *module_name, const char *name)
{
	PyObject *module = PyImport_ImportModule(module_name), *type;
	if (module == NULL)
		return NULL;
	type = PyObject_GetAttrString(module, name);
	Py_DECREF(module);
	if (type != NULL && !PyType_Check(type)) {
		PyErr_Format(PyExc_TypeError, "%s.%s is not a class", module_name, name);
		Py_CLEAR(type);
	}
	return type;
}

int slot_offset(PyObject *type, PyObject *name, Py_ssize_t *offset)
{
	PyObject *descr = PyObject_GetAttr(type, name);
	PyMemberDef *member = descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)
		? ((PyMemberDescrObject *)descr)->d_member : NULL;
	Py_XDECREF(descr);  /* the member table is the class's, which the caller holds */
	if (member == NULL || member->type != T_OBJECT_EX || member->flags & READONLY) {
		if (!PyErr_Occurred())
			PyErr_Format(PyExc_TypeError, "%R.%U is not a writable slot", type, name);
		return -1;
	}
	*offset = member->offset;
	return 0;
}

static int slot_field_bind(SlotField *f, PyObject *type, const char *name)
{
	PyObject *interned = PyUnicode_InternFromString(name);
	if (interned == NULL || slot_offset(type, interned, &f->offset) < 0) {
		Py_XDECREF(interned);
		return -1;
	}
	f->name = interned;
	f->type = (PyTypeObject *)Py_NewRef(type);
	return 0;
}

int slot_fields_bind(SlotField *fields, const SlotFieldOf *of, int n, const char *module)
{
	if (fields[n - 1].type != NULL)
		return 0;
	for (int f = 0; f < n; f++) {
		PyObject *type = node_class(module, of[f].class);
		int rc = type == NULL ? -1 : slot_field_bind(&fields[f], type, of[f].name);
		Py_XDECREF(type);
		if (rc < 0)
			return -1;
	}
	return 0;
}

PyObject *slot_field_get(const SlotField *f, PyObject *obj)
{
	if (Py_TYPE(obj) == f->type) {
		PyObject *value = *(PyObject **)((char *)obj + f->offset);
		if (value != NULL)
			return Py_NewRef(value);
	}
	return PyObject_GetAttr(obj, f->name);  /* an unset slot's error too */
}

int slot_field_set(const SlotField *f, PyObject *obj, PyObject *value)
{
	if (Py_TYPE(obj) != f->type)
		return PyObject_SetAttr(obj, f->name, value);
	PyObject **slot = (PyObject **)((char *)obj + f->offset), *old = *slot;
	*slot = Py_NewRef(value);
	Py_XDECREF(old);
	return 0;
}

int counts_bind(Counts *c, PyObject *owner, const char *const *names, Py_ssize_t *index,
		int n)
{
	PyObject *counts = PyObject_GetAttrString(owner, "tally");
	int rc = counts == NULL ? -1
		: PyObject_GetBuffer(counts, &c->view, PyBUF_WRITABLE | PyBUF_FORMAT);
	Py_XDECREF(counts);
	if (rc < 0)
		return -1;
	if (c->view.itemsize != 8 || c->view.format == NULL || strcmp(c->view.format, "q") != 0) {
		PyErr_Format(PyExc_TypeError, "%s.tally is not an array of int64 counters",
			     Py_TYPE(owner)->tp_name);
		goto fail;
	}
	for (int i = 0; i < n; i++) {
		PyObject *counter = PyObject_GetAttrString((PyObject *)Py_TYPE(owner), names[i]);
		PyObject *at = counter == NULL ? NULL : PyObject_GetAttrString(counter, "index");
		index[i] = at == NULL ? -1 : PyLong_AsSsize_t(at);
		Py_XDECREF(counter);
		Py_XDECREF(at);
		if (index[i] < 0 || index[i] >= c->view.len / 8) {
			if (!PyErr_Occurred())
				PyErr_Format(PyExc_IndexError, "%s.%s is past its tally",
					     Py_TYPE(owner)->tp_name, names[i]);
			goto fail;
		}
	}
	return 0;
fail:
	counts_release(c);
	return -1;
}

void counts_release(Counts *c)
{
	if (c->view.obj != NULL)
		PyBuffer_Release(&c->view);
}

static int bind_elem_type(void)
{
	if (elem_type != NULL)
		return 0;
	PyObject *type = node_class("pybpf.emulated.maps.htab_elem", "HtabElem");
	PyObject *head = node_class("pybpf.emulated.maps.bpf_lru_list", "_Head");
	if (type == NULL || head == NULL) {
		Py_XDECREF(type);
		Py_XDECREF(head);
		return -1;
	}
	for (int f = 0; f < ELEM_FIELDS; f++) {
		Py_ssize_t in_head = -1;
		if (slot_offset(type, *elem_names[f], &elem_offset[f]) < 0
		    || (f >= ELEM_PREV && slot_offset(head, *elem_names[f], &in_head) < 0)) {
			Py_DECREF(type);
			Py_DECREF(head);
			return -1;
		}
		if (f >= ELEM_PREV && in_head != elem_offset[f]) {  /* LruNode's slot in both */
			PyErr_Format(PyExc_TypeError, "_Head.%U is not LruNode's", *elem_names[f]);
			Py_DECREF(type);
			Py_DECREF(head);
			return -1;
		}
	}
	/* kept for good, as their modules keep them */
	elem_type = (PyTypeObject *)type;
	head_type = (PyTypeObject *)head;
	return 0;
}

/* PcpuFreelist's counters the core counts, in HtabCore.freelist_at's order */
enum { FREELIST_POPS, FREELIST_PUSHES };
static const char *const FREELIST_COUNTED[] = {"pops", "pushes"};

/* Whether ``field`` of ``elem`` is at its offset */
static inline int in_slot(PyObject *elem, int field)
{
	return Py_TYPE(elem) == elem_type || (field >= ELEM_PREV && Py_TYPE(elem) == head_type);
}

PyObject *elem_get(PyObject *elem, int field)
{
	if (in_slot(elem, field)) {
		PyObject *value = *(PyObject **)((char *)elem + elem_offset[field]);
		if (value != NULL)
			return Py_NewRef(value);
	}
	return PyObject_GetAttr(elem, *elem_names[field]);  /* an unset slot's error too */
}

int write_line(PyObject *model, PyObject *obj, int cpu)
{
	if (model == NULL)
		return 0;
	PyObject *addr = elem_get(obj, ELEM_ADDR);
	uint64_t at = 0;
	if (addr == NULL) {
		if (!PyErr_ExceptionMatches(PyExc_AttributeError))
			return -1;
		PyErr_Clear();  /* not placed: free to touch */
	} else {
		int rc = parse_addr(addr, &at);
		Py_DECREF(addr);
		if (rc < 0)
			return -1;
	}
	return model_access((CacheModel *)model, cpu, at, 1) == -1.0 && PyErr_Occurred() ? -1 : 0;
}

int elem_set(PyObject *elem, int field, PyObject *value)
{
	if (!in_slot(elem, field))
		return PyObject_SetAttr(elem, *elem_names[field], value);
	PyObject **slot = (PyObject **)((char *)elem + elem_offset[field]), *old = *slot;
	*slot = Py_NewRef(value);
	Py_XDECREF(old);
	return 0;
}

/* A NO_PREALLOC map's element count and allocator, where its allocator is bpf_mem_alloc's
 * design done in C (else ma stays unbound and its calls Python) */
static int bind_mem_alloc(HtabCore *c, PyObject *bpf_map)
{
	PyObject *ma = attr(bpf_map, "ma"), *percpu_counter = NULL, *max_entries = NULL;
	int rc = ma == NULL ? -1 : mem_alloc_bind(&c->ma, ma);
	if (rc > 0) {
		int atomic_count = -1;
		rc = (c->count_lock = attr(bpf_map, "count_lock")) == NULL
			|| counts_bind(&c->elem_counts, bpf_map, (const char *[]){"count"},
				       &c->count_at, 1) < 0
			|| (max_entries = attr(bpf_map, "max_entries")) == NULL
			|| ((c->max_entries = PyLong_AsLongLong(max_entries)) == -1
			    && PyErr_Occurred())
			|| (percpu_counter = attr(bpf_map, "use_percpu_counter")) == NULL
			|| (atomic_count = !PyObject_IsTrue(percpu_counter)) < 0
			|| (atomic_count && (c->count_addr = attr(bpf_map, "count_addr")) == NULL)
			? -1 : 0;
	}
	Py_XDECREF(ma);
	Py_XDECREF(percpu_counter);
	Py_XDECREF(max_entries);
	return rc;
}

static int htab_core_init(PyObject *op, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"bpf_map", "bucket_size", "update_elem", "delete_elem", NULL};
	HtabCore *c = (HtabCore *)op;
	PyObject *bpf_map, *update_elem, *delete_elem, *storage = NULL, *stats = NULL, *values = NULL;
	PyObject *mask = NULL, *stripe_mask = NULL, *base = NULL, *prealloc = NULL, *percpu = NULL;
	PyObject *value_size = NULL, *slot_size = NULL, *lru = NULL;
	PyObject *model = NULL, *modeled = NULL, *clock = NULL, *hashrnd = NULL, *special = NULL;
	Py_ssize_t slot_bytes;
	unsigned long long bucket_size;
	uint64_t seed;
	int rc = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "OKOO", kwlist, &bpf_map, &bucket_size,
					 &update_elem, &delete_elem))
		return -1;
	if (c->map != NULL) {
		PyErr_SetString(PyExc_RuntimeError, "HtabCore is made once per map");
		return -1;
	}
	if (bind_elem_type() < 0 || bind_run_state_type() < 0)
		return -1;
	c->map = Py_NewRef(bpf_map);
	c->update_elem = Py_NewRef(update_elem);
	c->delete_elem = Py_NewRef(delete_elem);
	c->bucket_size = bucket_size;
	PyObject *errors = PyImport_ImportModule("pybpf.errors");
	if (errors == NULL)
		return -1;
	c->kernel_error = attr(errors, "KernelError");
	Py_DECREF(errors);
	if (c->kernel_error == NULL || timing_ref_bind(&c->timing, bpf_map) < 0
	    || (model = attr(c->timing.timing, "_cache_model")) == NULL
	    || (modeled = attr(c->timing.timing, "modeled")) == NULL
	    || (clock = attr(c->timing.timing, "clock")) == NULL
	    || (special = attr(bpf_map, "special_fields")) == NULL
	    || (storage = attr(bpf_map, "storage")) == NULL
	    || (c->table = attr(storage, "table")) == NULL
	    || (values = attr(storage, "values")) == NULL
	    || (c->buckets = attr(storage, "buckets")) == NULL
	    || (c->nonempty = attr(storage, "nonempty")) == NULL
	    || (c->stripes = attr(bpf_map, "locks")) == NULL
	    || (c->bucket_locks = attr(bpf_map, "_bucket_locks")) == NULL
	    || (c->hash_fn = attr(bpf_map, "_hash_cached")) == NULL
	    || (hashrnd = attr(bpf_map, "hashrnd")) == NULL
	    || (c->current = attr(bpf_map, "_current")) == NULL
	    || (stats = attr(bpf_map, "access_stats")) == NULL
	    || (c->extra_elems = attr(bpf_map, "extra_elems")) == NULL
	    || (c->key_size = attr(bpf_map, "key_size")) == NULL
	    || (mask = attr(bpf_map, "mask")) == NULL
	    || (stripe_mask = attr(bpf_map, "stripe_mask")) == NULL
	    || (base = attr(bpf_map, "bucket_base")) == NULL
	    || (prealloc = attr(bpf_map, "prealloc")) == NULL
	    || (percpu = attr(bpf_map, "percpu")) == NULL
	    || (lru = attr(bpf_map, "lru")) == NULL
	    || (value_size = attr(bpf_map, "value_size")) == NULL
	    || (slot_size = attr(bpf_map, "slot_size")) == NULL)
		goto out;
	/* with modeled time, the costs are charged to the C model; without it, to nothing */
	int charged = PyObject_IsTrue(modeled), has_special = PyObject_IsTrue(special);
	if (charged < 0 || has_special < 0)
		goto out;
	c->special_fields = (char)has_special;
	if (charged && !PyObject_TypeCheck(model, &CacheModelType)) {
		PyErr_SetString(PyExc_TypeError, "HtabCore needs the map's timing to run the C model "
				"or no modeled time");
		goto out;
	}
	if (charged)
		c->model = Py_NewRef(model);
	if (!PyList_CheckExact(clock) || PyList_GET_SIZE(clock) > INT_MAX) {
		PyErr_SetString(PyExc_TypeError, "HtabCore: Timing.clock is a list per CPU");
		goto out;
	}
	c->ncpus = (int)PyList_GET_SIZE(clock);
	if (access_counts_bind(&c->access, stats, c->ncpus) < 0)
		goto out;
	if (!PyDict_CheckExact(c->table) || !PyDict_CheckExact(c->buckets)
	    || !PyByteArray_CheckExact(c->nonempty) || !PyList_CheckExact(c->stripes)
	    || !PyDict_CheckExact(c->bucket_locks)
	    || !PyList_CheckExact(c->extra_elems) || (values != Py_None && !PyDict_CheckExact(values))) {
		PyErr_SetString(PyExc_TypeError, "HtabCore: the map's storage is not what it expects");
		goto out;
	}
	if (values != Py_None)
		c->values = Py_NewRef(values);
	if ((c->prealloc = PyObject_IsTrue(prealloc)) < 0 || (c->percpu = PyObject_IsTrue(percpu)) < 0
	    || (c->lru = PyObject_IsTrue(lru)) < 0
	    || (c->value_size = PyLong_AsSsize_t(value_size)) < 0
	    || (c->key_bytes = PyLong_AsSsize_t(c->key_size)) < 0
	    || (slot_bytes = PyLong_AsSsize_t(slot_size)) < 0
	    || (c->zeros = PyObject_CallFunction((PyObject *)&PyBytes_Type, "n", slot_bytes)) == NULL
	    || parse_addr(mask, &c->mask) < 0 || parse_addr(stripe_mask, &c->stripe_mask) < 0
	    || parse_addr(hashrnd, &seed) < 0
	    || parse_addr(base, &c->bucket_base) < 0)
		goto out;
	if (seed > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError, "HtabCore: the map's hashrnd is a u32");
		goto out;
	}
	c->hashrnd = (uint32_t)seed;
	if (c->lru && c->percpu) {
		PyErr_SetString(PyExc_TypeError, "HtabCore: an LRU_PERCPU_HASH map has none");
		goto out;
	}
	if (c->lru && ((c->lru_list = attr(bpf_map, "lru_list")) == NULL
		       || lru_bind(&c->lru_lists, c->lru_list) < 0))
		goto out;
	if (!c->prealloc && (rc = bind_mem_alloc(c, bpf_map)) < 0)
		goto out;
	rc = -1;
	if (c->prealloc && !c->lru) {
		if ((c->freelist = attr(bpf_map, "freelist")) == NULL
		    || counts_bind(&c->freelist_counts, c->freelist, FREELIST_COUNTED,
				   c->freelist_at, 2) < 0
		    || (c->free_lists = attr(c->freelist, "lists")) == NULL
		    || (c->free_locks = attr(c->freelist, "tlocks")) == NULL)
			goto out;
		if (!PyList_CheckExact(c->free_lists) || !PyList_CheckExact(c->free_locks)) {
			PyErr_SetString(PyExc_TypeError, "HtabCore: the free list is not what it expects");
			goto out;
		}
	}
	rc = 0;
out:
	Py_XDECREF(storage);
	Py_XDECREF(stats);
	Py_XDECREF(values);
	Py_XDECREF(mask);
	Py_XDECREF(stripe_mask);
	Py_XDECREF(base);
	Py_XDECREF(prealloc);
	Py_XDECREF(percpu);
	Py_XDECREF(value_size);
	Py_XDECREF(slot_size);
	Py_XDECREF(lru);
	Py_XDECREF(model);
	Py_XDECREF(modeled);
	Py_XDECREF(clock);
	Py_XDECREF(hashrnd);
	Py_XDECREF(special);
	return rc;
}

static int htab_core_traverse(PyObject *op, visitproc visit, void *arg)
{
	HtabCore *c = (HtabCore *)op;
	Py_VISIT(c->map);
	Py_VISIT(c->update_elem);
	Py_VISIT(c->delete_elem);
	TIMING_REF_VISIT(c->timing);
	Py_VISIT(c->model);
	Py_VISIT(c->kernel_error);
	Py_VISIT(c->table);
	Py_VISIT(c->values);
	Py_VISIT(c->buckets);
	Py_VISIT(c->nonempty);
	Py_VISIT(c->stripes);
	Py_VISIT(c->bucket_locks);
	Py_VISIT(c->hash_fn);
	Py_VISIT(c->current);
	Py_VISIT(c->access.cpu_node);
	Py_VISIT(c->access.local.obj);
	Py_VISIT(c->access.remote.obj);
	Py_VISIT(c->freelist);
	Py_VISIT(c->free_lists);
	Py_VISIT(c->free_locks);
	Py_VISIT(c->extra_elems);
	Py_VISIT(c->key_size);
	Py_VISIT(c->zeros);
	Py_VISIT(c->last_key);
	Py_VISIT(c->lru_list);
	Py_VISIT(c->count_lock);
	Py_VISIT(c->count_addr);
	Py_VISIT(c->lru_lists.lru);
	Py_VISIT(c->lru_lists.local);
	Py_VISIT(c->lru_lists.common);
	return mem_alloc_traverse(&c->ma, visit, arg);
}

static int htab_core_clear(PyObject *op)
{
	HtabCore *c = (HtabCore *)op;
	Py_CLEAR(c->map);
	Py_CLEAR(c->update_elem);
	Py_CLEAR(c->delete_elem);
	TIMING_REF_CLEAR(c->timing);
	Py_CLEAR(c->model);
	Py_CLEAR(c->kernel_error);
	Py_CLEAR(c->table);
	Py_CLEAR(c->values);
	Py_CLEAR(c->buckets);
	Py_CLEAR(c->nonempty);
	Py_CLEAR(c->stripes);
	Py_CLEAR(c->bucket_locks);
	Py_CLEAR(c->hash_fn);
	Py_CLEAR(c->current);
	access_counts_release(&c->access);
	Py_CLEAR(c->freelist);
	Py_CLEAR(c->free_lists);
	Py_CLEAR(c->free_locks);
	Py_CLEAR(c->extra_elems);
	Py_CLEAR(c->key_size);
	Py_CLEAR(c->zeros);
	Py_CLEAR(c->last_key);
	Py_CLEAR(c->lru_list);
	Py_CLEAR(c->count_lock);
	counts_release(&c->elem_counts);
	counts_release(&c->freelist_counts);
	Py_CLEAR(c->count_addr);
	mem_alloc_clear(&c->ma);
	lru_clear(&c->lru_lists);
	return 0;
}

static void htab_core_dealloc(PyObject *op)
{
	PyObject_GC_UnTrack(op);
	htab_core_clear(op);
	Py_TYPE(op)->tp_free(op);
}

/* -- small steps --------------------------------------------------------------------------- */

int call_method(PyObject *obj, PyObject *name)
{
	PyObject *done = PyObject_CallMethodNoArgs(obj, name);
	Py_XDECREF(done);
	return done == NULL ? -1 : 0;
}

int lock_release(PyObject *lock, int rc)
{
	PyObject *type, *exc, *tb;
	PyErr_Fetch(&type, &exc, &tb);
	if (host_lock_release(lock) < 0)
		rc = -1;
	if (type != NULL) {
		PyErr_Restore(type, exc, tb);
		rc = -1;
	}
	return rc;
}

/* The CPU ``obj`` names (a new reference to it, its number in *cpu), or NULL where it is not
 * one of the machine's ``ncpus`` */
static PyObject *cpu_of(PyObject *obj, int ncpus, int *cpu)
{
	long n = obj == NULL ? -1 : PyLong_AsLong(obj);
	if (n == -1 && PyErr_Occurred()) {
		Py_CLEAR(obj);
	} else if (obj != NULL && (n < 0 || n >= ncpus)) {
		PyErr_Format(PyExc_IndexError, "CPU %ld is not a CPU of the machine", n);
		Py_CLEAR(obj);
	}
	*cpu = (int)n;
	return obj;
}

/* The running CPU (machine.current.cpu), as an int and as the object */
PyObject *running_cpu(PyObject *current, int ncpus, int *cpu)
{
	return cpu_of(PyObject_GetAttr(current, s_cpu), ncpus, cpu);
}

static PyObject *current_cpu(HtabCore *c, int *cpu)
{
	return running_cpu(c->current, c->ncpus, cpu);
}

PyObject *native_run_cpu(int64_t run_on, PyObject *current, int ncpus, int *cpu)
{
	return run_on >= 0 ? cpu_of(PyLong_FromLongLong(run_on), ncpus, cpu)
		: running_cpu(current, ncpus, cpu);
}

/* RunState's fields the map helpers read on every call (its __slots__), bound at their first
 * use */
enum { RUN_STATE_MEM, RUN_STATE_VALUE_REGIONS, RUN_STATE_CPU, RUN_STATE_MACHINE,
       RUN_STATE_NEXT_REGION, RUN_STATE_ENV, RUN_STATE_ENTRY_OF, RUN_STATE_FIELDS };
static SlotField run_state_fields[RUN_STATE_FIELDS];

int bind_run_state_type(void)
{
	static const SlotFieldOf of[RUN_STATE_FIELDS] = {
		[RUN_STATE_MEM] = {"RunState", "mem"},
		[RUN_STATE_VALUE_REGIONS] = {"RunState", "value_regions"},
		[RUN_STATE_CPU] = {"RunState", "cpu"}, [RUN_STATE_MACHINE] = {"RunState", "machine"},
		[RUN_STATE_NEXT_REGION] = {"RunState", "next_region"},
		[RUN_STATE_ENV] = {"RunState", "env"}, [RUN_STATE_ENTRY_OF] = {"RunState", "entry_of"},
	};
	return slot_fields_bind(run_state_fields, of, RUN_STATE_FIELDS,
				"pybpf.emulated.prog.memory");
}

static PyObject *run_state_get(PyObject *rs, int field)
{
	return slot_field_get(&run_state_fields[field], rs);
}

PyObject *run_regions(PyObject *rs)
{
	return run_state_get(rs, RUN_STATE_MEM);
}

PyObject *run_machine(PyObject *rs)
{
	return run_state_get(rs, RUN_STATE_MACHINE);
}

PyObject *run_env(PyObject *rs)
{
	return run_state_get(rs, RUN_STATE_ENV);
}

PyObject *run_entry_of(PyObject *rs)
{
	return run_state_get(rs, RUN_STATE_ENTRY_OF);
}

int run_set_cpu(PyObject *rs, PyObject *cpu)
{
	return slot_field_set(&run_state_fields[RUN_STATE_CPU], rs, cpu);
}

PyObject *run_next_region(PyObject *rs)
{
	return run_state_get(rs, RUN_STATE_NEXT_REGION);
}

int run_set_next_region(PyObject *rs, PyObject *region)
{
	return slot_field_set(&run_state_fields[RUN_STATE_NEXT_REGION], rs, region);
}

int run_set_regions(PyObject *rs, PyObject *mem)
{
	return slot_field_set(&run_state_fields[RUN_STATE_MEM], rs, mem);
}

/* The CPU a run is on: rs.cpu, which run_prog sets when the run begins (a program runs where
 * it began, as with the kernel's migrate_disable), else the machine's running CPU */
PyObject *run_cpu(PyObject *rs, PyObject *current, int ncpus, int *cpu)
{
	PyObject *obj = run_state_get(rs, RUN_STATE_CPU);
	if (obj == NULL)
		return NULL;
	if (obj != Py_None)
		return cpu_of(obj, ncpus, cpu);
	Py_DECREF(obj);
	return running_cpu(current, ncpus, cpu);
}

/* htab_map_hash of key (the map's _hash_cached, done here for key bytes of the map's size):
 * an int, or NULL */
static PyObject *hash_of(HtabCore *c, PyObject *key)
{
	if (!PyBytes_CheckExact(key) || PyBytes_GET_SIZE(key) != c->key_bytes)
		return PyObject_CallOneArg(c->hash_fn, key);
	return PyLong_FromUnsignedLong(htab_map_hash((const uint8_t *)PyBytes_AS_STRING(key),
						     (uint32_t)c->key_bytes, c->hashrnd));
}

/* HtabMap._bucket_lock(hash): the modeled spinlock of the bucket (made by Python the first
 * time); None without modeled time */
static PyObject *bucket_lock(HtabCore *c, PyObject *index, PyObject *hash)
{
	if (c->model == NULL)
		return Py_NewRef(Py_None);
	PyObject *lock = PyDict_GetItemWithError(c->bucket_locks, index);
	if (lock != NULL)
		return Py_NewRef(lock);
	if (PyErr_Occurred())
		return NULL;
	return PyObject_CallMethodOneArg(c->map, s_bucket_lock, hash);
}

/* Bucket ``at`` becomes non-empty (``used``) or empty: its byte in HtabBuckets.nonempty,
 * written under the bucket's lock */
static int mark_bucket(HtabCore *c, uint64_t at, char used)
{
	if (at >= (uint64_t)PyByteArray_GET_SIZE(c->nonempty)) {
		PyErr_SetString(PyExc_IndexError, "a bucket past the map's non-empty index");
		return -1;
	}
	PyByteArray_AS_STRING(c->nonempty)[at] = used;
	return 0;
}

/* The first position of ``elem`` (by identity) in ``list``, or -1 */
static Py_ssize_t position(PyObject *list, PyObject *elem)
{
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++)
		if (PyList_GET_ITEM(list, i) == elem)
			return i;
	return -1;
}

static int table_set(HtabCore *c, PyObject *key, PyObject *elem)
{
	PyObject *value;
	if (PyDict_SetItem(c->table, key, elem) < 0)
		return -1;
	if (c->values == NULL)
		return 0;
	if ((value = elem_get(elem, ELEM_VALUE)) == NULL)
		return -1;
	int rc = PyDict_SetItem(c->values, key, value);
	Py_DECREF(value);
	return rc;
}

/* HtabBuckets.link: hlist_nulls_add_head_rcu of elem into bucket ``index`` (whose list is
 * made the first time and kept when it empties) */
static int link_elem(HtabCore *c, PyObject *elem, PyObject *key, PyObject *index, uint64_t at)
{
	PyObject *bucket = PyDict_GetItemWithError(c->buckets, index);
	if (bucket == NULL) {
		if (PyErr_Occurred() || (bucket = PyList_New(0)) == NULL)
			return -1;
		int rc = PyDict_SetItem(c->buckets, index, bucket);
		Py_DECREF(bucket);  /* the dict holds it */
		if (rc < 0)
			return -1;
	} else if (!PyList_Check(bucket)) {
		PyErr_SetString(PyExc_TypeError, "a hash map's bucket is a list");
		return -1;
	}
	if ((PyList_GET_SIZE(bucket) == 0 && mark_bucket(c, at, 1) < 0)
	    || PyList_Insert(bucket, 0, elem) < 0)
		return -1;
	return table_set(c, key, elem);
}

/* HtabBuckets.replace: ``new`` at the front of old's bucket, old out of it */
static int replace_elem(HtabCore *c, PyObject *old, PyObject *new, PyObject *key,
			PyObject *index)
{
	PyObject *bucket = PyDict_GetItemWithError(c->buckets, index);
	if (bucket == NULL) {
		if (!PyErr_Occurred())
			PyErr_SetObject(PyExc_KeyError, index);
		return -1;
	}
	Py_ssize_t at = position(bucket, old);
	if (at < 0) {
		PyErr_SetString(PyExc_ValueError, "list.remove(x): x not in list");
		return -1;
	}
	if (PyList_SetSlice(bucket, at, at + 1, NULL) < 0 || PyList_Insert(bucket, 0, new) < 0)
		return -1;
	return table_set(c, key, new);
}

/* HtabBuckets.unlink: hlist_nulls_del_rcu of elem (from bucket ``index``), which is the
 * table's element for key: its callers found it there under the bucket's lock */
static int unlink_elem(HtabCore *c, PyObject *elem, PyObject *key, PyObject *index,
		       uint64_t at)
{
	PyObject *bucket = PyDict_GetItemWithError(c->buckets, index);
	if (bucket == NULL) {
		if (!PyErr_Occurred())
			PyErr_SetObject(PyExc_KeyError, index);
		return -1;
	}
	Py_ssize_t pos = position(bucket, elem);
	if (pos < 0) {
		PyErr_SetString(PyExc_ValueError, "list.remove(x): x not in list");
		return -1;
	}
	if (PyList_SetSlice(bucket, pos, pos + 1, NULL) < 0)
		return -1;
	if (PyList_GET_SIZE(bucket) == 0 && mark_bucket(c, at, 0) < 0)
		return -1;
	if (PyDict_DelItem(c->table, key) < 0)
		return -1;
	return c->values == NULL ? 0 : PyDict_DelItem(c->values, key);
}

/* A preallocated element from ``cpu``'s own free list (PcpuFreelist.pop's hot case with its
 * locked_access), or NULL without an exception where that list is empty */
static PyObject *freelist_pop(HtabCore *c, PyObject *cpu_obj, int cpu)
{
	PyObject *list = PyList_GET_ITEM(c->free_lists, cpu);
	Py_ssize_t n = PyList_GET_SIZE(list);
	if (n == 0)
		return NULL;
	PyObject *elem = Py_NewRef(PyList_GET_ITEM(list, n - 1)), *addr = NULL;
	if (PyList_SetSlice(list, n - 1, n, NULL) < 0)
		goto fail;
	counts_add(&c->freelist_counts, c->freelist_at[FREELIST_POPS], 1);
	if (c->model == NULL)
		return elem;
	if ((addr = elem_get(elem, ELEM_ADDR)) == NULL)
		goto fail;
	PyObject *args[3] = {cpu_obj, PyList_GET_ITEM(c->free_locks, cpu), addr};
	PyObject *done = cm_locked_access(c->model, args, 3, NULL);
	if (done == NULL)
		goto fail;
	Py_DECREF(done);
	Py_DECREF(addr);
	return elem;
fail:
	Py_XDECREF(addr);
	Py_DECREF(elem);
	return NULL;
}

/* PcpuFreelist.push onto ``cpu``'s list, with its locked_access */
static int freelist_push(HtabCore *c, PyObject *elem, PyObject *cpu_obj, int cpu)
{
	PyObject *addr;
	if (PyList_Append(PyList_GET_ITEM(c->free_lists, cpu), elem) < 0)
		return -1;
	counts_add(&c->freelist_counts, c->freelist_at[FREELIST_PUSHES], 1);
	if (c->model == NULL)
		return 0;
	if ((addr = elem_get(elem, ELEM_ADDR)) == NULL)
		return -1;
	PyObject *args[3] = {cpu_obj, PyList_GET_ITEM(c->free_locks, cpu), addr};
	PyObject *done = cm_locked_access(c->model, args, 3, NULL);
	Py_DECREF(addr);
	Py_XDECREF(done);
	return done == NULL ? -1 : 0;
}

/* dst[0:n] = src[0:n] where dst is a bytearray and src bytes, each of n bytes at least (no
 * resize: a copy): 1; 0 where they are not, for the caller's slice assignment */
static int copy_prefix(PyObject *dst, PyObject *src, Py_ssize_t n)
{
	if (!PyByteArray_CheckExact(dst) || !PyBytes_CheckExact(src)
	    || PyByteArray_GET_SIZE(dst) < n || PyBytes_GET_SIZE(src) < n)
		return 0;
	memcpy(PyByteArray_AS_STRING(dst), PyBytes_AS_STRING(src), n);
	return 1;
}

/* HtabElemMemory._fill_value from a program on ``cpu`` (onallcpus false): the element's line
 * written; a map with one value buffer counts the access and takes the value, a per-CPU map
 * takes it in this CPU's slot, a new element (``init``) with the other slots zeroed */
static int fill_value(HtabCore *c, PyObject *elem, PyObject *value, int cpu, int init)
{
	PyObject *node = NULL, *buffer = NULL, *part = NULL;
	int rc = -1;
	if (write_line(c->model, elem, cpu) < 0 || (buffer = elem_get(elem, ELEM_VALUE)) == NULL)
		goto out;
	if (!c->percpu) {
		if ((node = elem_get(elem, ELEM_NODE)) == NULL)
			goto out;
		if (count_access(&c->access, cpu, node) < 0)
			goto out;
		/* buffer[:] = value, a copy where they are the same size */
		Py_ssize_t n = PyBytes_CheckExact(value) ? PyBytes_GET_SIZE(value) : -1;
		rc = PyByteArray_CheckExact(buffer) && PyByteArray_GET_SIZE(buffer) == n
			&& copy_prefix(buffer, value, n) ? 0
			: PySequence_SetSlice(buffer, 0, PY_SSIZE_T_MAX, value);
		goto out;
	}
	if (!PyList_Check(buffer) || PyList_GET_SIZE(buffer) <= cpu) {
		PyErr_SetString(PyExc_TypeError, "a per-CPU element's value is a list of slots");
		goto out;
	}
	PyObject *slot = PyList_GET_ITEM(buffer, cpu);
	if (!copy_prefix(slot, value, c->value_size)
	    && ((part = PySequence_GetSlice(value, 0, c->value_size)) == NULL
		|| PySequence_SetSlice(slot, 0, c->value_size, part) < 0))
		goto out;
	for (Py_ssize_t other = 0; init && other < PyList_GET_SIZE(buffer); other++)
		if (other != cpu && PySequence_SetSlice(PyList_GET_ITEM(buffer, other), 0,
							PY_SSIZE_T_MAX, c->zeros) < 0)
			goto out;
	rc = 0;
out:
	Py_XDECREF(node);
	Py_XDECREF(buffer);
	Py_XDECREF(part);
	return rc;
}

/* The map's element count (NO_PREALLOC) moved by delta under its lock; an element counted
 * for a new key (not replacing ``old``) in a full map is not: 1. Else 0, or -1. */
static int count_elems(HtabCore *c, int delta, PyObject *old)
{
	if (host_lock_acquire(c->count_lock) < 0)
		return -1;
	int full = delta > 0 && old == NULL
		&& counts_get(&c->elem_counts, c->count_at) >= c->max_entries;
	if (!full)
		counts_add(&c->elem_counts, c->count_at, delta);
	return lock_release(c->count_lock, 0) < 0 ? -1 : full;
}

/* count_elem's cost: an atomic_t is a locked add on the map's line (a percpu_counter stays
 * on this CPU: nothing) */
static int count_elem(HtabCore *c, PyObject *cpu_obj)
{
	if (c->count_addr == NULL || c->model == NULL)
		return 0;
	PyObject *done = PyObject_CallMethodObjArgs(c->timing.timing, s_atomic, cpu_obj,
						    c->count_addr, NULL);
	Py_XDECREF(done);
	return done == NULL ? -1 : 0;
}

/* alloc_htab_elem's element from bpf_mem_alloc: counted, then unit_alloc's; NULL without an
 * exception where the map is full (the Python method raises E2BIG), with one where the
 * allocator had none (ENOMEM, from the map's _alloc_failed) */
static PyObject *mem_alloc_elem(HtabCore *c, PyObject *old, PyObject *cpu_obj, int cpu)
{
	int full = count_elems(c, 1, old);
	if (full != 0 || count_elem(c, cpu_obj) < 0)
		return NULL;
	PyObject *elem = unit_alloc(&c->ma, c->model, cpu_obj, cpu);
	if (elem == Py_None) {
		Py_DECREF(elem);
		Py_XDECREF(PyObject_CallMethodNoArgs(c->map, s_alloc_failed));
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_RuntimeError, "_alloc_failed did not raise");
		return NULL;
	}
	return elem;
}

/* free_htab_elem (``count_cost``) or _retire_replaced of a map on bpf_mem_alloc: uncounted,
 * then unit_free's */
static int mem_free_elem(HtabCore *c, PyObject *elem, int count_cost, PyObject *cpu_obj,
			 int cpu)
{
	return count_elems(c, -1, NULL) < 0 || (count_cost && count_elem(c, cpu_obj) < 0)
		|| unit_free(&c->ma, c->model, elem, cpu_obj, cpu) < 0 ? -1 : 0;
}

/* alloc_htab_elem: the element that takes ``key`` (replacing ``old`` if not NULL), filled;
 * the hot cases here (a free list's, a spare, bpf_mem_alloc's), the rest by the Python
 * method */
static PyObject *alloc_elem(HtabCore *c, PyObject *key, PyObject *value, PyObject *hash,
			    PyObject *old, PyObject *cpu_obj, int cpu)
{
	PyObject *elem = NULL;
	if (c->prealloc) {
		if (old != NULL && PyList_GET_SIZE(c->extra_elems)) {
			PyObject *spares = PyList_GET_ITEM(c->extra_elems, cpu);
			Py_ssize_t n = PyList_GET_SIZE(spares);
			if (n) {
				elem = Py_NewRef(PyList_GET_ITEM(spares, n - 1));
				if (PyList_SetSlice(spares, n - 1, n, NULL) < 0)
					Py_CLEAR(elem);
			} else {
				elem = PyObject_CallMethodNoArgs(c->map, s_new_elem_on_home);
			}
			if (elem == NULL)
				return NULL;
		} else if ((elem = freelist_pop(c, cpu_obj, cpu)) == NULL && PyErr_Occurred()) {
			return NULL;
		}
	} else if (c->ma.ma != NULL
		   && (elem = mem_alloc_elem(c, old, cpu_obj, cpu)) == NULL && PyErr_Occurred()) {
		return NULL;
	}
	if (elem == NULL) {  /* a steal, an element to make, E2BIG, or another allocator */
		PyObject *args[7] = {c->map, key, value, hash, old != NULL ? old : Py_None,
				     s_false, cpu_obj};
		return PyObject_VectorcallMethod(s_alloc_htab_elem, args,
						 7, NULL);
	}
	if (elem_set(elem, ELEM_KEY, key) < 0 || elem_set(elem, ELEM_HASH, hash) < 0
	    || fill_value(c, elem, value, cpu, 1) < 0)
		Py_CLEAR(elem);
	return elem;
}

int model_unlock(PyObject *model, PyObject *cpu_obj, PyObject *tlock, int rc)
{
	if (model == NULL)
		return PyErr_Occurred() ? -1 : rc;
	PyObject *type, *exc, *tb;
	PyErr_Fetch(&type, &exc, &tb);
	PyObject *args[2] = {cpu_obj, tlock};
	PyObject *done = cm_spin_unlock(model, args, 2);
	if (done == NULL)
		rc = -1;
	Py_XDECREF(done);
	if (type != NULL) {
		PyErr_Restore(type, exc, tb);
		rc = -1;
	}
	return rc;
}

/* An exception raised while the locks are held is kept across their release */
static int unlock(HtabCore *c, PyObject *cpu_obj, PyObject *tlock, PyObject *stripe)
{
	return lock_release(stripe, tlock == NULL ? 0 : model_unlock(c->model, cpu_obj, tlock, 0));
}

/* The bucket's modeled spinlock taken (the stripe's released where that fails) */
static int spin_lock(HtabCore *c, PyObject *cpu_obj, PyObject *tlock, PyObject *stripe)
{
	if (c->model == NULL)
		return 0;
	PyObject *args[2] = {cpu_obj, tlock};
	PyObject *done = cm_spin_lock(c->model, args, 2);
	if (done == NULL) {
		unlock(c, NULL, NULL, stripe);
		return -1;
	}
	Py_DECREF(done);
	return 0;
}

/* An op's own charge and jhash over the key (HtabMap._op_cost's charges) */
static int charge_op(HtabCore *c, PyObject *cpu_obj, PyObject *event)
{
	if (c->model == NULL)
		return 0;
	return charge_n(c->model, cpu_obj, event, s_one) < 0
		|| charge_n(c->model, cpu_obj, s_jhash_byte, c->key_size) < 0 ? -1 : 0;
}

/* HtabMap._walk_cost: bucket ``index`` (of hash ``h``) walked up to ``key`` */
static int walk_cost(HtabCore *c, int cpu, PyObject *key, PyObject *index, uint64_t h)
{
	if (c->model == NULL)
		return 0;
	PyObject *chain = PyDict_GetItemWithError(c->buckets, index);
	if (chain == NULL && PyErr_Occurred())
		return -1;
	return htab_chain_cost((CacheModel *)c->model, cpu,
			       c->bucket_base + (h & c->mask) * c->bucket_size, chain, key);
}

/* check_flags: whether BPF_NOEXIST or BPF_EXIST refuses the update, which its Python method
 * then raises (1, the exception set), or not (0) */
static int refused(HtabCore *c, PyObject *old, long flags, PyObject *flags_obj)
{
	if ((old == NULL || flags != BPF_NOEXIST) && (old != NULL || flags != BPF_EXIST))
		return 0;
	Py_XDECREF(PyObject_CallMethodObjArgs(c->map, s_check_flags, old != NULL ? old : Py_None,
					      flags_obj, NULL));
	if (!PyErr_Occurred())
		PyErr_SetString(PyExc_RuntimeError, "check_flags let a refused update pass");
	return 1;
}

/* The stripe lock of ``h``, taken */
static PyObject *take_stripe(HtabCore *c, uint64_t h)
{
	PyObject *stripe = PyList_GET_ITEM(c->stripes, h & c->stripe_mask);
	Py_INCREF(stripe);
	if (host_lock_acquire(stripe) < 0)
		Py_CLEAR(stripe);
	return stripe;
}

/* -- the operations ------------------------------------------------------------------------ */

/* HtabMap.htab_map_update_elem_in_place from a program (onallcpus false): a per-CPU map's
 * element takes the value in this CPU's slot where it is; a new one is linked */
static PyObject *update_in_place(HtabCore *c, PyObject *key, PyObject *value, long flags,
				 PyObject *flags_obj, PyObject *cpu_obj, int cpu)
{
	PyObject *hash = NULL, *stripe = NULL, *tlock = NULL, *index = NULL;
	PyObject *old = NULL, *new = NULL, *result = NULL;
	uint64_t h;
	int failed = 1;
	if ((hash = hash_of(c, key)) == NULL || parse_addr(hash, &h) < 0
	    || (index = PyLong_FromUnsignedLongLong(h & c->mask)) == NULL
	    || (tlock = bucket_lock(c, index, hash)) == NULL
	    || (stripe = take_stripe(c, h)) == NULL)
		goto out;
	if (spin_lock(c, cpu_obj, tlock, stripe) < 0)
		goto out;
	/* the locks are held: every way out goes through unlock */
	if (charge_op(c, cpu_obj, s_update_event) < 0 || walk_cost(c, cpu, key, index, h) < 0)
		goto locked_out;
	old = Py_XNewRef(PyDict_GetItemWithError(c->table, key));
	if (old == NULL && PyErr_Occurred())
		goto locked_out;
	if (refused(c, old, flags, flags_obj))
		goto locked_out;
	if (old != NULL) {
		if (fill_value(c, old, value, cpu, 0) < 0)
			goto locked_out;
	} else if ((new = alloc_elem(c, key, value, hash, NULL, cpu_obj, cpu)) == NULL
		   || link_elem(c, new, key, index, h & c->mask) < 0) {
		goto locked_out;
	}
	failed = 0;
locked_out:
	if (unlock(c, cpu_obj, tlock, stripe) == 0 && !failed)
		result = Py_NewRef(Py_None);
out:
	Py_XDECREF(hash);
	Py_XDECREF(stripe);
	Py_XDECREF(tlock);
	Py_XDECREF(index);
	Py_XDECREF(old);
	Py_XDECREF(new);
	return result;
}

/* HtabLruMap.prealloc_lru_pop: a node from the LRU (which may evict), in C where its lists
 * are (ENOMEM from the map's _no_free_node) */
static PyObject *lru_pop(HtabCore *c, PyObject *cpu_obj, int cpu)
{
	if (c->lru_lists.lru == NULL)
		return PyObject_CallMethodNoArgs(c->map, s_prealloc_lru_pop);
	PyObject *node = lru_pop_free(&c->lru_lists, c->model, cpu_obj, cpu);
	if (node != Py_None)
		return node;
	Py_DECREF(node);
	Py_XDECREF(PyObject_CallMethodNoArgs(c->map, s_no_free_node));
	if (!PyErr_Occurred())
		PyErr_SetString(PyExc_RuntimeError, "_no_free_node did not raise");
	return NULL;
}

/* BpfLru.push_free of node (HtabLruMap.htab_lru_push_free, the map holding no fds) */
static int lru_push(HtabCore *c, PyObject *node, PyObject *cpu_obj, int cpu)
{
	if (c->lru_lists.lru != NULL)
		return lru_push_free(&c->lru_lists, c->model, node, cpu_obj, cpu);
	PyObject *done = PyObject_CallMethodOneArg(c->lru_list, s_push_free, node);
	Py_XDECREF(done);
	return done == NULL ? -1 : 0;
}

/* The map's _release_elem of an unlinked element: an LRU map's back to its lists (its value
 * has no special fields to free here), another's by the Python method */
static int release_elem(HtabCore *c, PyObject *elem, PyObject *cpu_obj, int cpu)
{
	if (c->lru_lists.lru != NULL)
		return lru_push(c, elem, cpu_obj, cpu);
	PyObject *released = PyObject_CallMethodOneArg(c->map, s_release_elem, elem);
	Py_XDECREF(released);
	return released == NULL ? -1 : 0;
}

/* HtabLruMap.htab_lru_map_update_elem: a node from the LRU (which may evict: Python's
 * prealloc_lru_pop) takes the value before the bucket lock; it goes back to the LRU if the
 * flags refuse the update, the replaced one after the locks */
static PyObject *lru_update(HtabCore *c, PyObject *key, PyObject *value, long flags,
			    PyObject *flags_obj, PyObject *cpu_obj, int cpu)
{
	PyObject *hash = NULL, *stripe = NULL, *tlock = NULL, *index = NULL;
	PyObject *node = NULL, *old = NULL, *result = NULL;
	PyObject *type = NULL, *exc = NULL, *tb = NULL;  /* check_flags' error */
	uint64_t h;
	int failed = 1;
	if ((hash = hash_of(c, key)) == NULL || parse_addr(hash, &h) < 0
	    || charge_op(c, cpu_obj, s_lru_update_event) < 0
	    || (node = lru_pop(c, cpu_obj, cpu)) == NULL
	    || elem_set(node, ELEM_KEY, key) < 0 || elem_set(node, ELEM_HASH, hash) < 0
	    || fill_value(c, node, value, cpu, 1) < 0
	    || (index = PyLong_FromUnsignedLongLong(h & c->mask)) == NULL
	    || (tlock = bucket_lock(c, index, hash)) == NULL
	    || (stripe = take_stripe(c, h)) == NULL)
		goto out;
	if (spin_lock(c, cpu_obj, tlock, stripe) < 0)
		goto out;
	/* the locks are held: every way out goes through unlock */
	if (walk_cost(c, cpu, key, index, h) < 0)
		goto locked_out;
	old = Py_XNewRef(PyDict_GetItemWithError(c->table, key));
	if (old == NULL && PyErr_Occurred())
		goto locked_out;
	if (refused(c, old, flags, flags_obj)) {
		PyErr_Fetch(&type, &exc, &tb);  /* raised once the node is back */
		Py_CLEAR(old);
	} else if (old == NULL ? link_elem(c, node, key, index, h & c->mask) < 0
		   : elem_set(node, ELEM_REF, s_one) < 0
		   || replace_elem(c, old, node, key, index) < 0) {
		goto locked_out;
	}
	failed = 0;
locked_out:
	if (unlock(c, cpu_obj, tlock, stripe) < 0 || failed)
		goto out;
	if (type != NULL) {  /* the node goes back, but what it evicted stays evicted */
		if (lru_push(c, node, cpu_obj, cpu) == 0) {
			PyErr_Restore(type, exc, tb);  /* it takes them */
			type = exc = tb = NULL;
		}
		goto out;
	}
	if (old != NULL && release_elem(c, old, cpu_obj, cpu) < 0)
		goto out;
	result = Py_NewRef(Py_None);
out:
	Py_XDECREF(hash);
	Py_XDECREF(stripe);
	Py_XDECREF(tlock);
	Py_XDECREF(index);
	Py_XDECREF(node);
	Py_XDECREF(old);
	Py_XDECREF(type);
	Py_XDECREF(exc);
	Py_XDECREF(tb);
	return result;
}

/* The map's update from a program on cpu (a HASH map's htab_map_update_elem, a PERCPU_HASH
 * map's htab_percpu_map_update_elem, an LRU_HASH map's htab_lru_map_update_elem) */
static PyObject *update(HtabCore *c, PyObject *key, PyObject *value, PyObject *flags_obj,
			PyObject *cpu_obj, int cpu)
{
	long flags = PyLong_AsLong(flags_obj);
	if (flags == -1 && PyErr_Occurred()) {
		if (!PyErr_ExceptionMatches(PyExc_OverflowError))
			return NULL;
		PyErr_Clear();
	}
	/* other flags (BPF_F_LOCK, errors), special fields */
	if (flags < 0 || flags > BPF_EXIST || !PyBytes_CheckExact(key) || c->special_fields)
		return PyObject_Vectorcall(c->update_elem,
					   (PyObject *[]){c->map, key, value, flags_obj}, 4, NULL);
	if (c->percpu)
		return update_in_place(c, key, value, flags, flags_obj, cpu_obj, cpu);
	if (c->lru)
		return lru_update(c, key, value, flags, flags_obj, cpu_obj, cpu);
	PyObject *old = NULL, *hash = NULL, *stripe = NULL, *tlock = NULL;
	PyObject *index = NULL, *new = NULL, *result = NULL;
	uint64_t h;
	int failed = 1;
	if ((hash = hash_of(c, key)) == NULL || parse_addr(hash, &h) < 0
	    || (stripe = take_stripe(c, h)) == NULL)
		goto out;
	uint64_t at = h & c->mask;
	if (charge_op(c, cpu_obj, s_update_event) < 0
	    || (index = PyLong_FromUnsignedLongLong(at)) == NULL
	    || (tlock = bucket_lock(c, index, hash)) == NULL) {
		unlock(c, NULL, NULL, stripe);
		goto out;
	}
	if (spin_lock(c, cpu_obj, tlock, stripe) < 0)
		goto out;
	/* the locks are held: every way out goes through unlock */
	if (walk_cost(c, cpu, key, index, h) < 0)
		goto locked_out;
	Py_XSETREF(old, Py_XNewRef(PyDict_GetItemWithError(c->table, key)));
	if (old == NULL && PyErr_Occurred())
		goto locked_out;
	if (refused(c, old, flags, flags_obj))
		goto locked_out;
	if ((new = alloc_elem(c, key, value, hash, old, cpu_obj, cpu)) == NULL)
		goto locked_out;
	if (old == NULL ? link_elem(c, new, key, index, at) < 0
	    : replace_elem(c, old, new, key, index) < 0)
		goto locked_out;
	failed = 0;
locked_out:
	if (unlock(c, cpu_obj, tlock, stripe) < 0 || failed)
		goto out;
	if (old != NULL) {  /* unlinked now: a preallocated map's CPU keeps it as its spare */
		if (c->prealloc) {
			if (PyList_Append(PyList_GET_ITEM(c->extra_elems, cpu), old) < 0)
				goto out;
		} else if (c->ma.ma != NULL) {
			if (mem_free_elem(c, old, 0, cpu_obj, cpu) < 0)
				goto out;
		} else {
			PyObject *retire_args[3] = {c->map, old, cpu_obj};
			PyObject *retired = PyObject_VectorcallMethod(
				s_retire_replaced, retire_args, 3, NULL);
			if (retired == NULL)
				goto out;
			Py_DECREF(retired);
		}
	}
	result = Py_NewRef(Py_None);
out:
	Py_XDECREF(old);
	Py_XDECREF(hash);
	Py_XDECREF(stripe);
	Py_XDECREF(tlock);
	Py_XDECREF(index);
	Py_XDECREF(new);
	return result;
}

/* update(key, value, flags): the map's map_update_elem (a program's update) on the running
 * CPU */
static PyObject *htab_core_update(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	int cpu;
	if (nargs != 3) {
		PyErr_SetString(PyExc_TypeError, "update(key, value, flags)");
		return NULL;
	}
	PyObject *cpu_obj = current_cpu((HtabCore *)op, &cpu);
	PyObject *result = cpu_obj == NULL ? NULL
		: update((HtabCore *)op, args[0], args[1], args[2], cpu_obj, cpu);
	Py_XDECREF(cpu_obj);
	return result;
}

/* delete_node(node): HtabLruMap.htab_lru_map_delete_node, the LRU's eviction callback:
 * whether the node's key was unhashed (it was still the node's) */
static PyObject *delete_node(HtabCore *c, PyObject *node, PyObject *cpu_obj, int cpu)
{
	PyObject *hash = NULL, *key = NULL, *stripe = NULL, *tlock = NULL;
	PyObject *index = NULL, *result = NULL;
	uint64_t h;
	int unhashed = 0;
	if ((hash = elem_get(node, ELEM_HASH)) == NULL
	    || parse_addr(hash, &h) < 0 || (key = elem_get(node, ELEM_KEY)) == NULL
	    || (index = PyLong_FromUnsignedLongLong(h & c->mask)) == NULL
	    || (tlock = bucket_lock(c, index, hash)) == NULL || (stripe = take_stripe(c, h)) == NULL
	    || spin_lock(c, cpu_obj, tlock, stripe) < 0)
		goto out;
	/* the locks are held: every way out goes through unlock */
	PyObject *linked = NULL;
	int rc = walk_cost(c, cpu, key, index, h) < 0
		|| ((linked = PyDict_GetItemWithError(c->table, key)) == NULL && PyErr_Occurred())
		? -1 : 0;
	if (rc == 0 && linked == node) {
		unhashed = 1;
		rc = unlink_elem(c, node, key, index, h & c->mask);
	}
	if (unlock(c, cpu_obj, tlock, stripe) < 0 || rc < 0)
		goto out;
	if (unhashed) {  /* htab_put_fd_value: a timer or lock in the value, by the map's method */
		PyObject *put = !c->special_fields ? NULL
			: PyObject_CallMethodOneArg(c->map, s_put_fd_value, node);
		Py_XDECREF(put);
		if (c->special_fields && put == NULL)
			goto out;
	}
	result = Py_NewRef(unhashed ? Py_True : Py_False);
out:
	Py_XDECREF(hash);
	Py_XDECREF(key);
	Py_XDECREF(stripe);
	Py_XDECREF(tlock);
	Py_XDECREF(index);
	return result;
}

static PyObject *htab_core_delete_node(PyObject *op, PyObject *node)
{
	int cpu;
	PyObject *cpu_obj = current_cpu((HtabCore *)op, &cpu), *result = NULL;
	if (cpu_obj != NULL)
		result = delete_node((HtabCore *)op, node, cpu_obj, cpu);
	Py_XDECREF(cpu_obj);
	return result;
}

PyObject *htab_evict_node(PyObject *del_from_htab, PyObject *node, PyObject *cpu_obj, int cpu)
{
	if (PyCFunction_Check(del_from_htab)
	    && PyCFunction_GET_FUNCTION(del_from_htab) == htab_core_delete_node)
		return delete_node((HtabCore *)PyCFunction_GET_SELF(del_from_htab), node, cpu_obj,
				   cpu);
	return PyObject_CallOneArg(del_from_htab, node);
}

/* delete(key): HtabMap.htab_map_delete_elem without reading the value (an LRU map's element
 * goes back to the LRU through its _release_elem) */
static PyObject *delete(HtabCore *c, PyObject *key, PyObject *cpu_obj, int cpu)
{
	if (!PyBytes_CheckExact(key) || c->special_fields)  /* a timer to free */
		return PyObject_CallFunctionObjArgs(c->delete_elem, c->map, key, NULL);
	PyObject *hash = NULL, *stripe = NULL, *tlock = NULL, *index = NULL;
	PyObject *elem = NULL, *elem_hash = NULL, *elem_index = NULL, *result = NULL;
	uint64_t h, eh;
	int failed = 1;
	if ((hash = hash_of(c, key)) == NULL || parse_addr(hash, &h) < 0
	    || (stripe = take_stripe(c, h)) == NULL)
		goto out;
	uint64_t at = h & c->mask;
	if ((index = PyLong_FromUnsignedLongLong(at)) == NULL
	    || (tlock = bucket_lock(c, index, hash)) == NULL) {
		unlock(c, NULL, NULL, stripe);
		goto out;
	}
	if (spin_lock(c, cpu_obj, tlock, stripe) < 0)
		goto out;
	/* the locks are held: every way out goes through unlock */
	if (charge_op(c, cpu_obj, s_delete_event) < 0 || walk_cost(c, cpu, key, index, h) < 0)
		goto locked_out;
	elem = Py_XNewRef(PyDict_GetItemWithError(c->table, key));
	if (elem == NULL) {
		if (!PyErr_Occurred())  /* the map's own error: ENOENT */
			Py_XDECREF(PyObject_CallMethodNoArgs(c->map, s_key_not_found));
		goto locked_out;
	}
	/* unlinked from the bucket its own hash names, as HtabBuckets.unlink does */
	if ((elem_hash = elem_get(elem, ELEM_HASH)) == NULL || parse_addr(elem_hash, &eh) < 0
	    || (elem_index = eh == h ? Py_NewRef(index)
		: PyLong_FromUnsignedLongLong(eh & c->mask)) == NULL
	    || unlink_elem(c, elem, key, elem_index, eh & c->mask) < 0)
		goto locked_out;
	failed = 0;
locked_out:
	if (unlock(c, cpu_obj, tlock, stripe) < 0 || failed)
		goto out;
	if (c->freelist != NULL) {  /* free_htab_elem: back to this CPU's free list */
		if (freelist_push(c, elem, cpu_obj, cpu) < 0)
			goto out;
	} else if (c->ma.ma != NULL) {  /* free_htab_elem: back to bpf_mem_alloc */
		if (mem_free_elem(c, elem, 1, cpu_obj, cpu) < 0)
			goto out;
	} else if (release_elem(c, elem, cpu_obj, cpu) < 0) {  /* another allocator's, the LRU's */
		goto out;
	}
	result = Py_NewRef(Py_None);
out:
	Py_XDECREF(hash);
	Py_XDECREF(stripe);
	Py_XDECREF(tlock);
	Py_XDECREF(index);
	Py_XDECREF(elem);
	Py_XDECREF(elem_hash);
	Py_XDECREF(elem_index);
	return result;
}

/* delete(key): the map's map_delete_elem on the running CPU */
static PyObject *htab_core_delete(PyObject *op, PyObject *key)
{
	int cpu;
	PyObject *cpu_obj = current_cpu((HtabCore *)op, &cpu);
	PyObject *result = cpu_obj == NULL ? NULL : delete((HtabCore *)op, key, cpu_obj, cpu);
	Py_XDECREF(cpu_obj);
	return result;
}

/* htab_lru_map_lookup_elem's bpf_lru_node_set_ref: the reference bit set where it was clear,
 * a write of the element's line */
static int lru_set_ref(HtabCore *c, PyObject *elem, int cpu)
{
	PyObject *bit = elem_get(elem, ELEM_REF);
	int set = bit == NULL ? -1 : PyObject_IsTrue(bit);
	Py_XDECREF(bit);
	if (set != 0)
		return set > 0 ? 0 : -1;
	return elem_set(elem, ELEM_REF, s_one) < 0 || write_line(c->model, elem, cpu) < 0 ? -1 : 0;
}

/* lookup(key): htab_map_lookup_elem (a HASH map's live value), htab_percpu_map_lookup_elem
 * (this CPU's slot) or htab_lru_map_lookup_elem (the value, the node's reference bit set),
 * None where the key is absent */
static PyObject *lookup(HtabCore *c, PyObject *key, PyObject *cpu_obj, int cpu)
{
	PyObject *hash = NULL, *index = NULL, *elem, *node = NULL, *result = NULL;
	uint64_t h;
	if ((hash = hash_of(c, key)) == NULL || parse_addr(hash, &h) < 0
	    || charge_op(c, cpu_obj, s_lookup_event) < 0
	    || (index = PyLong_FromUnsignedLongLong(h & c->mask)) == NULL
	    || walk_cost(c, cpu, key, index, h) < 0)
		goto out;
	if ((elem = PyDict_GetItemWithError(c->table, key)) == NULL) {
		result = PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
		goto out;
	}
	Py_INCREF(elem);
	if (c->percpu) {  /* this CPU's slot, which lives on its node */
		access_local(&c->access)[cpu] += 1;
		PyObject *slots = elem_get(elem, ELEM_VALUE);
		if (slots != NULL && PyList_Check(slots) && cpu < PyList_GET_SIZE(slots))
			result = Py_NewRef(PyList_GET_ITEM(slots, cpu));
		else if (slots != NULL)
			PyErr_SetString(PyExc_TypeError,
					"a per-CPU element's value is a list of slots");
		Py_XDECREF(slots);
		Py_DECREF(elem);
		goto out;
	}
	if ((node = elem_get(elem, ELEM_NODE)) != NULL
	    && count_access(&c->access, cpu, node) == 0
	    && (!c->lru || lru_set_ref(c, elem, cpu) == 0))
		result = elem_get(elem, ELEM_VALUE);
	Py_DECREF(elem);
out:
	Py_XDECREF(hash);
	Py_XDECREF(index);
	Py_XDECREF(node);
	return result;
}

/* lookup(key): the map's map_lookup_elem on the running CPU */
static PyObject *htab_core_lookup(PyObject *op, PyObject *key)
{
	int cpu;
	PyObject *cpu_obj = current_cpu((HtabCore *)op, &cpu);
	PyObject *result = cpu_obj == NULL ? NULL : lookup((HtabCore *)op, key, cpu_obj, cpu);
	Py_XDECREF(cpu_obj);
	return result;
}

/* -- the map helpers, for the engines ------------------------------------------------------ */

/* The int of a region number, the last one kept (a run's stack is the same region, and so is
 * every run's, which begins at DYNAMIC_REGION_BASE): a new reference, or NULL */
static PyObject *region_index(uint64_t region)
{
	static uint64_t last = UINT64_MAX;
	static PyObject *last_index;
	if (region != last || last_index == NULL) {
		PyObject *index = PyLong_FromUnsignedLongLong(region);
		if (index == NULL)
			return NULL;
		Py_XSETREF(last_index, index);
		last = region;
	}
	return Py_NewRef(last_index);
}

PyObject *region_at(PyObject *mem, uint64_t ptr)
{
	PyObject *index = region_index(ptr >> 32);
	if (index == NULL)
		return NULL;
	PyObject *region = PyDict_GetItemWithError(mem, index);
	Py_DECREF(index);
	return region;
}

/* The ``size`` bytes at ``ptr``'s offset in ``region`` where it is a bytearray (the stack,
 * mostly) holding them, else NULL without an exception */
static PyObject *bytearray_bytes(PyObject *region, uint64_t ptr, Py_ssize_t size)
{
	Py_ssize_t off = (Py_ssize_t)(ptr & 0xffffffffu);
	if (!PyByteArray_CheckExact(region) || off + size > PyByteArray_GET_SIZE(region))
		return NULL;
	return PyBytes_FromStringAndSize(PyByteArray_AS_STRING(region) + off, size);
}

/* The ``size`` bytes at ``ptr`` when they lie in plain memory of the run (a bytearray
 * region, the stack mostly; a memoryview, the native tier's frames), else NULL without an
 * exception (the Python helper then reads them, or says why it cannot) */
PyObject *plain_bytes(PyObject *mem, uint64_t ptr, Py_ssize_t size)
{
	PyObject *region = region_at(mem, ptr), *bytes = NULL;
	Py_ssize_t off = (Py_ssize_t)(ptr & 0xffffffffu);
	if (region != NULL && PyByteArray_CheckExact(region))
		return bytearray_bytes(region, ptr, size);
	if (region == NULL || !PyMemoryView_Check(region))
		return NULL;
	Py_buffer view;
	if (PyObject_GetBuffer(region, &view, PyBUF_SIMPLE) < 0) {  /* released, strided */
		PyErr_Clear();
		return NULL;
	}
	if (off + size <= view.len)
		bytes = PyBytes_FromStringAndSize((const char *)view.buf + off, size);
	PyBuffer_Release(&view);
	return bytes;
}

/* A KernelError (``kernel_error``) becomes the helper's return value, -errno as a u64;
 * other errors stay */
static PyObject *helper_result(PyObject *kernel_error, PyObject *done)
{
	if (done != NULL) {
		Py_DECREF(done);
		return PyLong_FromLong(0);
	}
	if (!PyErr_ExceptionMatches(kernel_error))
		return NULL;
	PyObject *type, *exc, *tb;
	PyErr_Fetch(&type, &exc, &tb);
	PyErr_NormalizeException(&type, &exc, &tb);
	PyObject *err = exc == NULL ? NULL : PyObject_GetAttr(exc, s_errno);
	long value = err == NULL ? -1 : PyLong_AsLong(err);
	Py_XDECREF(err);
	if (value == -1 && PyErr_Occurred()) {
		Py_XDECREF(type);
		Py_XDECREF(exc);
		Py_XDECREF(tb);
		return NULL;
	}
	Py_XDECREF(type);
	Py_XDECREF(exc);
	Py_XDECREF(tb);
	return PyLong_FromUnsignedLongLong(-(uint64_t)value);
}

enum { HELPER_LOOKUP, HELPER_UPDATE, HELPER_DELETE };

/* RunState.region_of's new region: the run's next region holds value (which keeps it alive,
 * so its id stays unique), its pointer kept in ``regions`` under ``id`` */
static PyObject *new_value_region(PyObject *rs, PyObject *regions, PyObject *id,
				  PyObject *value)
{
	PyObject *region = run_state_get(rs, RUN_STATE_NEXT_REGION), *next = NULL;
	PyObject *mem = NULL, *pointer = NULL;
	uint64_t at;
	if (region == NULL || parse_addr(region, &at) < 0 || at >= 0xffffffffu
	    || (next = PyLong_FromUnsignedLongLong(at + 1)) == NULL
	    || (mem = run_regions(rs)) == NULL)
		goto out;
	if (slot_field_set(&run_state_fields[RUN_STATE_NEXT_REGION], rs, next) < 0
	    || PyObject_SetItem(mem, region, value) < 0
	    || (pointer = PyLong_FromUnsignedLongLong(at << 32)) == NULL
	    || PyDict_SetItem(regions, id, pointer) < 0)
		Py_CLEAR(pointer);
out:
	if (region != NULL && pointer == NULL && !PyErr_Occurred())
		PyErr_SetString(PyExc_OverflowError, "a run has at most 2**32 memory regions");
	Py_XDECREF(region);
	Py_XDECREF(next);
	Py_XDECREF(mem);
	return pointer;
}

PyObject *value_pointer(PyObject *rs, PyObject *value)
{
	if (value == Py_None)
		return PyLong_FromLong(0);
	/* its region in this run, given once (RunState.region_of) */
	PyObject *regions = run_state_get(rs, RUN_STATE_VALUE_REGIONS), *id = NULL;
	PyObject *result = NULL;
	if (regions != NULL && (id = PyLong_FromVoidPtr(value)) != NULL) {
		PyObject *pointer = PyDict_GetItemWithError(regions, id);
		result = pointer != NULL ? Py_NewRef(pointer) : PyErr_Occurred() ? NULL
			: PyDict_CheckExact(regions) ? new_value_region(rs, regions, id, value)
			: PyObject_CallMethodOneArg(rs, s_region_of, value);
	}
	Py_XDECREF(regions);
	Py_XDECREF(id);
	return result;
}

/* A modeled operation begins: Timing.sync on the run's CPU ``cpu_obj`` (a new reference, its
 * number in *cpu, or NULL where finding it failed), which it gives back, or NULL */
static PyObject *helper_sync(HtabCore *c, PyObject *cpu_obj, int *cpu)
{
	if (cpu_obj != NULL && timing_sync(&c->timing, (CacheModel *)c->model, cpu_obj, *cpu) < 0)
		Py_CLEAR(cpu_obj);
	return cpu_obj;
}

/* An update or delete of the key (and value) bytes on cpu, after helper_sync: r0 */
static PyObject *helper_change(HtabCore *c, int op, PyObject *key, PyObject *value,
			       PyObject *flags, PyObject *cpu_obj, int cpu)
{
	if (op == HELPER_UPDATE)
		return helper_result(c->kernel_error, update(c, key, value, flags, cpu_obj, cpu));
	return helper_result(c->kernel_error, delete(c, key, cpu_obj, cpu));
}

/* A helper's key bytes as the core's last key where they are its bytes, else kept as the last
 * key: a program's ops on one key (an update, a lookup, a delete) then share one object,
 * whose hash is known and which the table finds by identity where it holds the key. The
 * object in, its reference taken over; the object out, a new reference. */
static PyObject *remembered_key(HtabCore *c, PyObject *key)
{
	PyObject *last = c->last_key;
	if (last != NULL && PyBytes_GET_SIZE(key) == PyBytes_GET_SIZE(last)
	    && memcmp(PyBytes_AS_STRING(key), PyBytes_AS_STRING(last), PyBytes_GET_SIZE(key)) == 0) {
		Py_DECREF(key);
		return Py_NewRef(last);
	}
	Py_XSETREF(c->last_key, Py_NewRef(key));
	return key;
}

/* The key bytes at ``at`` (remembered_key's, without making bytes that are the last key's) */
static PyObject *key_from(HtabCore *c, const char *at)
{
	PyObject *last = c->last_key;
	if (last != NULL && memcmp(PyBytes_AS_STRING(last), at, c->key_bytes) == 0)
		return Py_NewRef(last);
	PyObject *key = PyBytes_FromStringAndSize(at, c->key_bytes);
	return key == NULL ? NULL : remembered_key(c, key);
}

/* The native tier's lookup, charged on the map of ``core``: HtabMap._op_cost(cpu,
 * "htab_map_lookup_elem", key, hash) of the key bytes at ``key``, which *kb gets (a new
 * reference: an LRU map's reference bit is set next). 0, or -1 with an exception. */
int htab_core_lookup_cost(PyObject *core, PyObject *cpu_obj, int cpu, const char *key,
			  PyObject **kb)
{
	HtabCore *c = (HtabCore *)core;
	uint64_t h = htab_map_hash((const uint8_t *)key, (uint32_t)c->key_bytes, c->hashrnd);
	PyObject *index = PyLong_FromUnsignedLongLong(h & c->mask);
	int rc = index == NULL || (*kb = key_from(c, key)) == NULL
		|| charge_op(c, cpu_obj, s_lookup_event) < 0
		|| walk_cost(c, cpu, *kb, index, h) < 0 ? -1 : 0;
	Py_XDECREF(index);
	return rc;
}

/* The ``size`` bytes a helper's pointer argument points to: in the frame's ``stack`` where
 * the JIT said the pointer is there (``in_stack``), else where plain_bytes finds them */
static PyObject *arg_bytes(PyObject *mem, PyObject *stack, int in_stack, uint64_t ptr,
			   Py_ssize_t size)
{
	PyObject *bytes = in_stack ? bytearray_bytes(stack, ptr, size) : NULL;
	return bytes != NULL || PyErr_Occurred() || !PyDict_CheckExact(mem) ? bytes
		: plain_bytes(mem, ptr, size);
}

/* bpf_map_{lookup,update,delete}_elem on this map, as helpers.map_*_elem bound to it:
 * (python, rs, r2, r3, r4, r5[, stack, on_stack]) -> r0, ``python`` the Python helper bound
 * to the map, which does what is not plain memory; the JIT adds the frame's stack where R2
 * (on_stack bit 1) or R3 (bit 2) surely point into it (jit.takes_stack). */
static PyObject *helper_call(HtabCore *c, int op, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 6 && nargs != 8) {
		PyErr_SetString(PyExc_TypeError, "(python, rs, r2, r3, r4, r5[, stack, on_stack])");
		return NULL;
	}
	PyObject *rs = args[1], *mem = NULL, *cpu_obj = NULL, *key = NULL, *value = NULL;
	PyObject *stack = nargs == 8 ? args[6] : NULL, *result = NULL;
	long on_stack = nargs == 8 ? PyLong_AsLong(args[7]) : 0;
	uint64_t r2, r3 = 0;
	int cpu;
	if ((on_stack == -1 && PyErr_Occurred()) || parse_addr(args[2], &r2) < 0
	    || (op == HELPER_UPDATE && parse_addr(args[3], &r3) < 0)
	    || (mem = run_regions(rs)) == NULL)
		goto out;
	/* a modeled operation begins (Timing.sync), then the bytes are read; where they are not
	 * plain memory the Python helper does it all (its sync then does nothing) */
	if ((cpu_obj = helper_sync(c, run_cpu(rs, c->current, c->ncpus, &cpu), &cpu)) == NULL)
		goto out;
	if ((key = arg_bytes(mem, stack, on_stack & 1, r2, c->key_bytes)) == NULL
	    || (key = remembered_key(c, key)) == NULL
	    || (op == HELPER_UPDATE
		&& (value = arg_bytes(mem, stack, on_stack & 2, r3, c->value_size)) == NULL)) {
		if (PyErr_Occurred())
			goto out;
		goto python;
	}
	if (op != HELPER_LOOKUP) {
		result = helper_change(c, op, key, value, args[4], cpu_obj, cpu);
	} else {
		PyObject *found = lookup(c, key, cpu_obj, cpu);
		result = found == NULL ? NULL : value_pointer(rs, found);
		Py_XDECREF(found);
	}
	goto out;
python:
	result = PyObject_Vectorcall(args[0], args + 1, 5, NULL);
out:
	Py_XDECREF(mem);
	Py_XDECREF(cpu_obj);
	Py_XDECREF(key);
	Py_XDECREF(value);
	return result;
}

/* bpf_map_update_elem (op HELPER_UPDATE) or bpf_map_delete_elem (HELPER_DELETE) bound to the
 * map of ``core``, called from the native tier's machine code with the key (and the value)
 * where it reads them natively, and R4: what helper_call does with them, without the trip
 * through Python, on the run's CPU ``run_on`` (rs.cpu, which helper_call reads; -1 for a run
 * without a machine: the running CPU). r0; where it raised, the error is kept for ``run``
 * (its ``error``) and *status set to ``raised``. The GIL is taken (a run charged from machine
 * code holds it). */
uint64_t pybpf_native_htab_op(uint64_t *status, uint64_t raised, PyObject *run,
			      PyObject *core, int64_t op, const char *key_at,
			      const char *value_at, uint64_t r4, int64_t run_on)
{
	HelperGil gil = helper_gil_take();
	HtabCore *c = (HtabCore *)core;
	PyObject *cpu_obj, *key = NULL, *value = NULL, *flags = NULL, *result = NULL;
	uint64_t r0 = 0;
	int cpu;
	/* the bytes are read after the sync, as helper_call reads them: other CPUs' tasks may
	 * write them meanwhile */
	if ((cpu_obj = helper_sync(c, native_run_cpu(run_on, c->current, c->ncpus, &cpu),
				   &cpu)) != NULL
	    && (key = key_from(c, key_at)) != NULL
	    && (op != HELPER_UPDATE
		|| (value = PyBytes_FromStringAndSize(value_at, c->value_size)) != NULL)
	    && (flags = PyLong_FromUnsignedLongLong(r4)) != NULL)
		result = helper_change(c, (int)op, key, value, flags, cpu_obj, cpu);
	if (result == NULL || parse_addr(result, &r0) < 0) {
		native_keep_error(run);
		*status = raised;
	}
	Py_XDECREF(cpu_obj);
	Py_XDECREF(key);
	Py_XDECREF(value);
	Py_XDECREF(flags);
	Py_XDECREF(result);
	helper_gil_give(gil);
	return r0;
}

/* The HtabCore of the map that the map pointer ``r1`` points to among the run's regions
 * ``mem`` (a map a program found at run time, in a map of maps), its key and value sizes in
 * sizes[0] and sizes[1]: the map its region holds for the run, which holds the core; else NULL
 * (no such map, or one without a core: the helper through Python, which says what is wrong).
 * The GIL is taken. */
PyObject *pybpf_native_map_core(PyObject *mem, uint64_t r1, int64_t *sizes)
{
	if (r1 & 0xffffffffu)
		return NULL;
	static IntCacheSlot regions[INT_CACHE_SLOTS];  /* R1's region: the same at every run */
	HelperGil gil = helper_gil_take();
	PyObject *region = cached_int(regions, r1 >> 32), *found = NULL;
	PyObject *obj = region == NULL ? NULL : PyDict_GetItemWithError(mem, region);  /* borrowed */
	if (obj != NULL && lookup_attr(obj, s_core, &found) > 0
	    && Py_IS_TYPE(found, &HtabCoreType)) {
		sizes[0] = ((HtabCore *)found)->key_bytes;
		sizes[1] = ((HtabCore *)found)->value_size;
	} else {
		Py_CLEAR(found);
	}
	PyErr_Clear();  /* what went wrong, the Python helper meets and reports */
	Py_XDECREF(region);
	Py_XDECREF(found);  /* alive with its map, which the run's regions hold */
	helper_gil_give(gil);
	return found;
}

static PyObject *htab_core_helper_lookup(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	return helper_call((HtabCore *)op, HELPER_LOOKUP, args, nargs);
}

static PyObject *htab_core_helper_update(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	return helper_call((HtabCore *)op, HELPER_UPDATE, args, nargs);
}

static PyObject *htab_core_helper_delete(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	return helper_call((HtabCore *)op, HELPER_DELETE, args, nargs);
}

static PyMethodDef htab_core_methods[] = {
	{"helper_lookup", (PyCFunction)(void (*)(void))htab_core_helper_lookup, METH_FASTCALL,
	 "helper_lookup(python, rs, r2, r3, r4, r5) -> r0: bpf_map_lookup_elem"},
	{"helper_update", (PyCFunction)(void (*)(void))htab_core_helper_update, METH_FASTCALL,
	 "helper_update(python, rs, r2, r3, r4, r5) -> r0: bpf_map_update_elem"},
	{"helper_delete", (PyCFunction)(void (*)(void))htab_core_helper_delete, METH_FASTCALL,
	 "helper_delete(python, rs, r2, r3, r4, r5) -> r0: bpf_map_delete_elem"},
	{"lookup", htab_core_lookup, METH_O,
	 "lookup(key): the map's map_lookup_elem (the live value or this CPU's slot, or None)"},
	{"update", (PyCFunction)(void (*)(void))htab_core_update, METH_FASTCALL,
	 "update(key, value, flags): the map's map_update_elem (a program's update)"},
	{"delete", htab_core_delete, METH_O,
	 "delete(key): HtabMap.htab_map_delete_elem"},
	{"delete_node", htab_core_delete_node, METH_O,
	 "delete_node(node) -> bool: HtabLruMap.htab_lru_map_delete_node, the LRU's eviction "
	 "callback"},
	{NULL, NULL, 0, NULL},
};

static PyMemberDef htab_core_members[] = {
	{"special_fields", T_BOOL, offsetof(HtabCore, special_fields), 0,
	 "whether the map's value has special fields (HtabMap.set_special_fields sets it)"},
	{NULL},
};

PyTypeObject HtabCoreType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pybpf._cache_model.HtabCore",
	.tp_doc = "HtabCore(bpf_map, bucket_size, update_elem, delete_elem): a HASH or "
		  "PERCPU_HASH map's lookup, update and delete from a program in C, charged to the C "
		  "cache model; update_elem and delete_elem, the map's Python methods, do the cases "
		  "handed back",
	.tp_basicsize = sizeof(HtabCore),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_new = PyType_GenericNew,
	.tp_init = htab_core_init,
	.tp_traverse = htab_core_traverse,
	.tp_clear = htab_core_clear,
	.tp_dealloc = htab_core_dealloc,
	.tp_methods = htab_core_methods,
	.tp_members = htab_core_members,
};

/* -- OpsHelpers ---------------------------------------------------------------------------- */

/* The map helpers of a map whose element ops are callables on bytes, run without modeled
 * time: a map in a shared segment (emulated/maps/shared.py), whose update and delete are
 * pybpf._shm_maps's C methods. helper_call's steps without a core: the key (and value)
 * bytes read where they are plain memory of the run, else the Python helper does it all. */
typedef struct {
	PyObject_HEAD
	Py_ssize_t key_size, value_size;
	PyObject *ops[3];       /* lookup(key) -> live value or None, update(key, value, flags),
				 * delete(key): in HELPER_LOOKUP, HELPER_UPDATE, HELPER_DELETE order */
	PyObject *kernel_error; /* what the ops raise, which becomes the helper's -errno */
} OpsHelpers;

static int ops_helpers_init(PyObject *op, PyObject *args, PyObject *kwds)
{
	OpsHelpers *h = (OpsHelpers *)op;
	PyObject *ops[3], *kernel_error;
	/* the run-state fields the helpers read, bound here where no HtabCore bound them */
	if (!PyArg_ParseTuple(args, "nnOOOO", &h->key_size, &h->value_size, &ops[0], &ops[1],
			      &ops[2], &kernel_error) || bind_run_state_type() < 0)
		return -1;
	for (int i = 0; i < 3; i++)
		Py_XSETREF(h->ops[i], Py_NewRef(ops[i]));
	Py_XSETREF(h->kernel_error, Py_NewRef(kernel_error));
	return 0;
}

static int ops_helpers_traverse(PyObject *op, visitproc visit, void *arg)
{
	OpsHelpers *h = (OpsHelpers *)op;
	for (int i = 0; i < 3; i++)
		Py_VISIT(h->ops[i]);
	Py_VISIT(h->kernel_error);
	return 0;
}

static int ops_helpers_clear(PyObject *op)
{
	OpsHelpers *h = (OpsHelpers *)op;
	for (int i = 0; i < 3; i++)
		Py_CLEAR(h->ops[i]);
	Py_CLEAR(h->kernel_error);
	return 0;
}

static void ops_helpers_dealloc(PyObject *op)
{
	PyObject_GC_UnTrack(op);
	ops_helpers_clear(op);
	Py_TYPE(op)->tp_free(op);
}

/* (python, rs, r2, r3, r4, r5) -> r0, as helper_call */
static PyObject *ops_helper_call(OpsHelpers *h, int op, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 6) {
		PyErr_SetString(PyExc_TypeError, "(python, rs, r2, r3, r4, r5)");
		return NULL;
	}
	if (h->kernel_error == NULL) {
		PyErr_SetString(PyExc_ValueError, "OpsHelpers was not initialised");
		return NULL;
	}
	PyObject *rs = args[1], *mem = NULL, *key = NULL, *value = NULL, *result = NULL;
	uint64_t r2, r3 = 0;
	if (parse_addr(args[2], &r2) < 0 || (op == HELPER_UPDATE && parse_addr(args[3], &r3) < 0)
	    || (mem = run_regions(rs)) == NULL)
		goto out;
	if (!PyDict_CheckExact(mem) || (key = plain_bytes(mem, r2, h->key_size)) == NULL
	    || (op == HELPER_UPDATE && (value = plain_bytes(mem, r3, h->value_size)) == NULL)) {
		if (!PyErr_Occurred())
			result = PyObject_Vectorcall(args[0], args + 1, 5, NULL);
		goto out;
	}
	if (op == HELPER_LOOKUP) {
		PyObject *found = PyObject_CallOneArg(h->ops[HELPER_LOOKUP], key);
		result = found == NULL ? NULL : value_pointer(rs, found);
		Py_XDECREF(found);
	} else if (op == HELPER_UPDATE) {
		PyObject *call_args[3] = {key, value, args[4]};
		result = helper_result(h->kernel_error,
				       PyObject_Vectorcall(h->ops[HELPER_UPDATE], call_args, 3, NULL));
	} else {
		result = helper_result(h->kernel_error,
				       PyObject_CallOneArg(h->ops[HELPER_DELETE], key));
	}
out:
	Py_XDECREF(mem);
	Py_XDECREF(key);
	Py_XDECREF(value);
	return result;
}

static PyObject *ops_helpers_lookup(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	return ops_helper_call((OpsHelpers *)op, HELPER_LOOKUP, args, nargs);
}

static PyObject *ops_helpers_update(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	return ops_helper_call((OpsHelpers *)op, HELPER_UPDATE, args, nargs);
}

static PyObject *ops_helpers_delete(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	return ops_helper_call((OpsHelpers *)op, HELPER_DELETE, args, nargs);
}

static PyMethodDef ops_helpers_methods[] = {
	{"helper_lookup", (PyCFunction)(void (*)(void))ops_helpers_lookup, METH_FASTCALL,
	 "helper_lookup(python, rs, r2, r3, r4, r5) -> r0: bpf_map_lookup_elem"},
	{"helper_update", (PyCFunction)(void (*)(void))ops_helpers_update, METH_FASTCALL,
	 "helper_update(python, rs, r2, r3, r4, r5) -> r0: bpf_map_update_elem"},
	{"helper_delete", (PyCFunction)(void (*)(void))ops_helpers_delete, METH_FASTCALL,
	 "helper_delete(python, rs, r2, r3, r4, r5) -> r0: bpf_map_delete_elem"},
	{NULL, NULL, 0, NULL},
};

PyTypeObject OpsHelpersType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pybpf._cache_model.OpsHelpers",
	.tp_doc = "OpsHelpers(key_size, value_size, lookup, update, delete, kernel_error): the "
		  "map helpers in C of a map whose element ops are these callables on bytes, "
		  "without modeled time (BpfMap.c_helpers)",
	.tp_basicsize = sizeof(OpsHelpers),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_new = PyType_GenericNew,
	.tp_init = ops_helpers_init,
	.tp_traverse = ops_helpers_traverse,
	.tp_clear = ops_helpers_clear,
	.tp_dealloc = ops_helpers_dealloc,
	.tp_methods = ops_helpers_methods,
};

int htab_core_ready(void)
{
	if (intern(&s_cpu, "cpu") < 0 || intern(&s_hash, "hash") < 0 || intern(&s_key, "key") < 0
	    || intern(&s_value, "value") < 0 || intern(&s_addr, "addr") < 0
	    || intern(&s_node, "node") < 0
	    || intern(&s_update_event, "htab_map_update_elem") < 0
	    || intern(&s_delete_event, "htab_map_delete_elem") < 0
	    || intern(&s_jhash_byte, "jhash_byte") < 0
	    || intern(&s_bucket_lock, "_bucket_lock") < 0
	    || intern(&s_check_flags, "check_flags") < 0
	    || intern(&s_alloc_htab_elem, "alloc_htab_elem") < 0
	    || intern(&s_new_elem_on_home, "_new_elem_on_home") < 0
	    || intern(&s_retire_replaced, "_retire_replaced") < 0
	    || intern(&s_release_elem, "_release_elem") < 0
	    || intern(&s_key_not_found, "_key_not_found") < 0
	    || intern(&s_lookup_event, "htab_map_lookup_elem") < 0
	    || intern(&s_errno, "errno") < 0 || intern(&s_ref, "ref") < 0
	    || intern(&s_lru_update_event, "htab_lru_map_update_elem") < 0
	    || intern(&s_prealloc_lru_pop, "prealloc_lru_pop") < 0
	    || intern(&s_no_free_node, "_no_free_node") < 0
	    || intern(&s_put_fd_value, "htab_put_fd_value") < 0
	    || intern(&s_push_free, "push_free") < 0
	    || intern(&s_region_of, "region_of") < 0
	    || intern(&s_atomic, "atomic") < 0 || intern(&s_alloc_failed, "_alloc_failed") < 0
	    || intern(&s_core, "_core") < 0
	    || intern(&s_prev, "prev") < 0 || intern(&s_next, "next") < 0
	    || intern(&s_type, "type") < 0 || mem_alloc_ready() < 0 || lru_ready() < 0)
		return -1;
	if ((s_one = PyLong_FromLong(1)) == NULL)
		return -1;
	s_false = Py_False;
	return PyType_Ready(&HtabCoreType) < 0 ? -1 : PyType_Ready(&OpsHelpersType);
}
