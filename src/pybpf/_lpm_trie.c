/*
 * trie_lookup_elem (kernel/bpf/lpm_trie.c) in C: its walk, LpmTrie._trie_lookup's loop over
 * the nodes (pybpf/emulated/maps/lpm_trie.py, trie_walk there is the reference), reading the
 * nodes' fields at their slots (a program's LPM lookup walks a node per prefix bit it
 * matches, each a handful of attribute reads and big-int operations in Python); and
 * LpmCore, a program's whole lookup with its charges, the map's bound lookup helper.
 */
#include "_cache_model.h"
#include "_int_cache.h"

enum { NODE_CHILD, NODE_PREFIXLEN, NODE_INTERMEDIATE, NODE_DATA, NODE_VALUE, NODE_NODE,
       NODE_FIELDS };

static PyTypeObject *node_type;  /* LpmTrieNode, bound by the first walk */
static Py_ssize_t node_offset[NODE_FIELDS];

static int bind_node_type(void)
{
	static const char *const names[NODE_FIELDS] = {
		[NODE_CHILD] = "child", [NODE_PREFIXLEN] = "prefixlen",
		[NODE_INTERMEDIATE] = "intermediate", [NODE_DATA] = "data",
		[NODE_VALUE] = "value", [NODE_NODE] = "node",
	};
	PyObject *type = node_class("pybpf.emulated.maps.lpm_trie", "LpmTrieNode");
	if (type == NULL)
		return -1;
	for (int f = 0; f < NODE_FIELDS; f++) {
		PyObject *name = PyUnicode_InternFromString(names[f]);
		int rc = name == NULL ? -1 : slot_offset(type, name, &node_offset[f]);
		Py_XDECREF(name);
		if (rc < 0) {
			Py_DECREF(type);
			return -1;
		}
	}
	node_type = (PyTypeObject *)type;  /* kept for good, as its module keeps it */
	return 0;
}

/* A node's field (borrowed), or NULL with an exception where it is unset */
static PyObject *field(PyObject *node, int f)
{
	PyObject *value = *(PyObject **)((char *)node + node_offset[f]);
	if (value == NULL)
		PyErr_Format(PyExc_AttributeError, "an LPM trie node without its field %d", f);
	return value;
}

/* The leading bits a and b have in common, of their ``size`` bytes */
static long common_bits(const unsigned char *a, const unsigned char *b, Py_ssize_t size)
{
	for (Py_ssize_t i = 0; i < size; i++)
		if (a[i] != b[i])
			return 8 * i + __builtin_clz((unsigned)(a[i] ^ b[i])) - 24;
	return 8 * size;
}

PyObject *lpm_trie_walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
	Py_ssize_t data_size;
	if (nargs != 3 || (data_size = PyLong_AsSsize_t(args[2])) < 0) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "lpm_trie_walk(root, key, data_size)");
		return NULL;
	}
	if (node_type == NULL && bind_node_type() < 0)
		return NULL;
	Py_buffer key;
	if (PyObject_GetBuffer(args[1], &key, PyBUF_SIMPLE) < 0)
		return NULL;
	PyObject *found = Py_None;
	if (key.len < 4 + data_size) {
		PyErr_Format(PyExc_ValueError, "an LPM key of %zd bytes, not 4 + %zd", key.len,
			     data_size);
		found = NULL;
		goto out;
	}
	const unsigned char *k = key.buf, *data = k + 4;
	long prefixlen = k[0] | k[1] << 8 | k[2] << 16 | (long)k[3] << 24;
	long max_prefixlen = 8 * data_size;
	if (prefixlen > max_prefixlen)
		goto out;
	PyObject *node = args[0];
	while (node != Py_None) {
		PyObject *obj;
		if (Py_TYPE(node) != node_type) {
			PyErr_Format(PyExc_TypeError, "an LPM trie node, not %.100s",
				     Py_TYPE(node)->tp_name);
			found = NULL;
			goto out;
		}
		long node_prefixlen;
		if ((obj = field(node, NODE_PREFIXLEN)) == NULL
		    || ((node_prefixlen = PyLong_AsLong(obj)) == -1 && PyErr_Occurred())
		    || (obj = field(node, NODE_DATA)) == NULL) {
			found = NULL;
			goto out;
		}
		if (!PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != data_size) {
			PyErr_SetString(PyExc_TypeError, "an LPM trie node's data is the key's");
			found = NULL;
			goto out;
		}
		/* __longest_prefix_match: common leading bits, capped by both prefix lengths */
		long matchlen = common_bits((const unsigned char *)PyBytes_AS_STRING(obj), data,
					    data_size);
		if (matchlen > node_prefixlen)
			matchlen = node_prefixlen;
		if (matchlen > prefixlen)
			matchlen = prefixlen;
		if (matchlen == max_prefixlen) {
			found = node;
			break;
		}
		if (matchlen < node_prefixlen)
			break;
		int intermediate = (obj = field(node, NODE_INTERMEDIATE)) == NULL ? -1
			: PyObject_IsTrue(obj);
		if (intermediate < 0) {
			found = NULL;
			goto out;
		}
		if (!intermediate)
			found = node;
		/* the child the first bit after the node's prefix names */
		int bit = data[node_prefixlen >> 3] >> (7 - (node_prefixlen & 7)) & 1;
		if ((obj = field(node, NODE_CHILD)) == NULL) {
			found = NULL;
			goto out;
		}
		if (!PyList_Check(obj) || PyList_GET_SIZE(obj) != 2) {
			PyErr_SetString(PyExc_TypeError, "an LPM trie node has two children");
			found = NULL;
			goto out;
		}
		node = PyList_GET_ITEM(obj, bit);
	}
out:
	PyBuffer_Release(&key);
	return Py_XNewRef(found);
}

/* -- LpmCore: the map's lookup helper ------------------------------------------------------ */

/*
 * bpf_map_lookup_elem on an LPM trie, as helpers.map_lookup_elem bound to it does it with
 * LpmTrie.trie_lookup_elem (the reference): the modeled operation begins (Timing.sync), the
 * key is read where it lies in plain memory of the run, trie_lookup_elem is charged, the
 * walk is lpm_trie_walk, the node found is counted local or remote, and R0 is the value's
 * pointer in the run. A key elsewhere is the Python helper's to read (it does it all).
 */
typedef struct {
	PyObject_HEAD
	PyObject *map;        /* the LpmTrie: its root, read at each lookup */
	TimingRef timing;     /* its Timing */
	PyObject *model;      /* the C cache model, or NULL without modeled time */
	PyObject *current;    /* machine.current: .cpu is the running CPU */
	AccessCounts access;  /* its AccessStats */
	PyObject *data_size;  /* an int */
	Py_ssize_t key_bytes;
	int ncpus;
} LpmCore;

static PyObject *s_lookup_event, *s_root, *s_one, *s_rs, *s_reach;

static int lpm_core_init(PyObject *op, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"bpf_map", NULL};
	LpmCore *c = (LpmCore *)op;
	PyObject *bpf_map, *machine = NULL, *stats = NULL, *model = NULL, *modeled = NULL;
	PyObject *clock = NULL, *key_size = NULL;
	int rc = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &bpf_map))
		return -1;
	if (c->map != NULL) {
		PyErr_SetString(PyExc_RuntimeError, "LpmCore is made once per map");
		return -1;
	}
	if (bind_run_state_type() < 0)
		return -1;
	c->map = Py_NewRef(bpf_map);
	if (timing_ref_bind(&c->timing, bpf_map) < 0
	    || (machine = PyObject_GetAttrString(bpf_map, "machine")) == NULL
	    || (c->current = PyObject_GetAttrString(machine, "current")) == NULL
	    || (stats = PyObject_GetAttrString(bpf_map, "access_stats")) == NULL
	    || (c->data_size = PyObject_GetAttrString(bpf_map, "data_size")) == NULL
	    || (key_size = PyObject_GetAttrString(bpf_map, "key_size")) == NULL
	    || (model = PyObject_GetAttrString(c->timing.timing, "_cache_model")) == NULL
	    || (modeled = PyObject_GetAttrString(c->timing.timing, "modeled")) == NULL
	    || (clock = PyObject_GetAttrString(c->timing.timing, "clock")) == NULL)
		goto out;
	int charged = PyObject_IsTrue(modeled);
	if (charged < 0 || (c->key_bytes = PyLong_AsSsize_t(key_size)) < 0)
		goto out;
	if (charged && !PyObject_TypeCheck(model, &CacheModelType)) {
		PyErr_SetString(PyExc_TypeError, "LpmCore needs the map's timing to run the C model "
				"or no modeled time");
		goto out;
	}
	if (!PyList_CheckExact(clock) || PyList_GET_SIZE(clock) > INT_MAX) {
		PyErr_SetString(PyExc_TypeError, "LpmCore: Timing.clock is a list per CPU");
		goto out;
	}
	if (access_counts_bind(&c->access, stats, PyList_GET_SIZE(clock)) < 0)
		goto out;
	if (charged)
		c->model = Py_NewRef(model);
	c->ncpus = (int)PyList_GET_SIZE(clock);
	rc = 0;
out:
	Py_XDECREF(machine);
	Py_XDECREF(stats);
	Py_XDECREF(model);
	Py_XDECREF(modeled);
	Py_XDECREF(clock);
	Py_XDECREF(key_size);
	return rc;
}

static int lpm_core_traverse(PyObject *op, visitproc visit, void *arg)
{
	LpmCore *c = (LpmCore *)op;
	Py_VISIT(c->map);
	TIMING_REF_VISIT(c->timing);
	Py_VISIT(c->model);
	Py_VISIT(c->current);
	Py_VISIT(c->access.cpu_node);
	Py_VISIT(c->access.local.obj);
	Py_VISIT(c->access.remote.obj);
	Py_VISIT(c->data_size);
	return 0;
}

static int lpm_core_clear(PyObject *op)
{
	LpmCore *c = (LpmCore *)op;
	Py_CLEAR(c->map);
	TIMING_REF_CLEAR(c->timing);
	Py_CLEAR(c->model);
	Py_CLEAR(c->current);
	access_counts_release(&c->access);
	Py_CLEAR(c->data_size);
	return 0;
}

static void lpm_core_dealloc(PyObject *op)
{
	PyObject_GC_UnTrack(op);
	lpm_core_clear(op);
	Py_TYPE(op)->tp_free(op);
}

/* trie_lookup_elem of key on cpu: the node's value (None where no prefix matches) */
static PyObject *lookup(LpmCore *c, PyObject *key, PyObject *cpu_obj, int cpu)
{
	PyObject *root = NULL, *found = NULL, *node, *value = NULL;
	if (charge_n(c->model, cpu_obj, s_lookup_event, s_one) < 0
	    || (root = own_attr(c->map, s_root)) == NULL)
		goto out;
	PyObject *walk_args[3] = {root, key, c->data_size};
	if ((found = lpm_trie_walk(NULL, walk_args, 3)) == NULL)
		goto out;
	if (found == Py_None) {
		value = Py_NewRef(Py_None);
		goto out;
	}
	/* a node the walk found: of the type whose slots it bound */
	if ((node = field(found, NODE_NODE)) != NULL && count_access(&c->access, cpu, node) == 0
	    && (value = field(found, NODE_VALUE)) != NULL)
		Py_INCREF(value);
out:
	Py_XDECREF(root);
	Py_XDECREF(found);
	return value;
}

/* helper_lookup(python, rs, r2, r3, r4, r5) -> r0: bpf_map_lookup_elem on this map, as
 * helpers.map_lookup_elem bound to it (``python``, which reads a key that is not plain) */
static PyObject *lpm_core_helper_lookup(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	LpmCore *c = (LpmCore *)op;
	if (nargs != 6) {
		PyErr_SetString(PyExc_TypeError, "(python, rs, r2, r3, r4, r5)");
		return NULL;
	}
	PyObject *mem = NULL, *cpu_obj = NULL, *key = NULL, *value = NULL, *result = NULL;
	uint64_t r2;
	int cpu;
	if (parse_addr(args[2], &r2) < 0 || (mem = run_regions(args[1])) == NULL
	    || (cpu_obj = run_cpu(args[1], c->current, c->ncpus, &cpu)) == NULL
	    || timing_sync(&c->timing, (CacheModel *)c->model, cpu_obj, cpu) < 0)
		goto out;
	if (!PyDict_CheckExact(mem) || (key = plain_bytes(mem, r2, c->key_bytes)) == NULL) {
		if (!PyErr_Occurred())  /* the Python helper does it all (its sync does nothing) */
			result = PyObject_Vectorcall(args[0], args + 1, 5, NULL);
		goto out;
	}
	if ((value = lookup(c, key, cpu_obj, cpu)) != NULL)
		result = value_pointer(args[1], value);
out:
	Py_XDECREF(mem);
	Py_XDECREF(cpu_obj);
	Py_XDECREF(key);
	Py_XDECREF(value);
	return result;
}

/*
 * The native tier's bpf_map_lookup_elem on an LpmCore's map, the key ``key_at`` where
 * compiled code reaches it: what helper_lookup does with it, on the run's CPU ``run_on``
 * (native_run_cpu's), for the _Run ``run`` whose state words are ``st``. R0 is the value's
 * pointer in the run (RunState.region_of: a region made for it at the run's first lookup,
 * numbered from the state's word ``next_region``, which then counts it) whose memory is
 * in the state's value table (``values``, ``value_slots`` slots; _Run.reach where its slot
 * lacks it), or 0 where no prefix matches. An error is kept for the run, ``status`` set to
 * ``raised``.
 */
uint64_t pybpf_native_lpm_lookup(uint64_t *status, uint64_t raised, PyObject *run,
				 PyObject *core, const char *key_at, int64_t run_on, uint64_t *st,
				 int64_t next_region, int64_t values, int64_t value_slots)
{
	/* the region numbers handed to the RunState and to reach: the same at every run */
	static IntCacheSlot regions[INT_CACHE_SLOTS];
	HelperGil gil = helper_gil_take();
	LpmCore *c = (LpmCore *)core;
	PyObject *key = NULL, *value = NULL, *rs = NULL, *region = NULL, *pointer = NULL;
	PyObject *reached = NULL;
	uint64_t r0 = 0;
	int cpu;
	PyObject *cpu_obj = native_run_cpu(run_on, c->current, c->ncpus, &cpu);
	/* the key is read after the sync, as helper_lookup reads it */
	if (cpu_obj == NULL || timing_sync(&c->timing, (CacheModel *)c->model, cpu_obj, cpu) < 0
	    || (key = PyBytes_FromStringAndSize(key_at, c->key_bytes)) == NULL
	    || (value = lookup(c, key, cpu_obj, cpu)) == NULL)
		goto fail;
	if (value == Py_None)
		goto out;
	if ((rs = PyObject_GetAttr(run, s_rs)) == NULL
	    || (region = cached_int(regions, st[next_region])) == NULL
	    || run_set_next_region(rs, region) < 0
	    || (pointer = value_pointer(rs, value)) == NULL || parse_addr(pointer, &r0) < 0)
		goto fail;
	uint64_t number = r0 >> 32;
	if (number >= st[next_region])  /* a region made for it: the next one counted */
		st[next_region] = number + 1;
	if (st[values + 3 * (int64_t)(number & (uint64_t)(value_slots - 1))] != number) {
		Py_CLEAR(region);
		if ((region = cached_int(regions, number)) == NULL
		    || (reached = PyObject_CallMethodOneArg(run, s_reach, region)) == NULL)
			goto fail;
	}
	goto out;
fail:
	native_keep_error(run);
	*status = raised;
	r0 = 0;
out:
	Py_XDECREF(cpu_obj);
	Py_XDECREF(key);
	Py_XDECREF(value);
	Py_XDECREF(rs);
	Py_XDECREF(region);
	Py_XDECREF(pointer);
	Py_XDECREF(reached);
	helper_gil_give(gil);
	return r0;
}

static PyMethodDef lpm_core_methods[] = {
	{"helper_lookup", (PyCFunction)(void (*)(void))lpm_core_helper_lookup, METH_FASTCALL,
	 "helper_lookup(python, rs, r2, r3, r4, r5) -> r0: bpf_map_lookup_elem"},
	{NULL, NULL, 0, NULL},
};

PyTypeObject LpmCoreType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pybpf._cache_model.LpmCore",
	.tp_doc = "LpmCore(bpf_map): an LPM trie's lookup helper in C, charged to the C cache "
		  "model (or to nothing without modeled time)",
	.tp_basicsize = sizeof(LpmCore),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_new = PyType_GenericNew,
	.tp_init = lpm_core_init,
	.tp_traverse = lpm_core_traverse,
	.tp_clear = lpm_core_clear,
	.tp_dealloc = lpm_core_dealloc,
	.tp_methods = lpm_core_methods,
};

int lpm_core_ready(void)
{
	if (intern(&s_lookup_event, "trie_lookup_elem") < 0 || intern(&s_root, "root") < 0
	    || intern(&s_rs, "rs") < 0 || intern(&s_reach, "reach") < 0
	    || (s_one = PyLong_FromLong(1)) == NULL)
		return -1;
	return PyType_Ready(&LpmCoreType);
}
