/*
 * NativeEntry: a native-tier program's entry (emulated/prog/native.py, NativeProgram.entry)
 * in C, what its Python ``run_native`` does around the compiled code on the common path: a
 * run's state taken from the program's free list and filled from the RunState (count,
 * budget, next region, its regions and values, a tracepoint's record reached natively, the
 * task where the program reads it), the compiled function called (without the GIL unless the
 * run keeps it), then the count and next region handed back and the run put back. That was
 * three Python frames around every run.
 *
 * The Python ``run_native`` stays the reference, and does what is not the common path: the
 * first run (no free state), a run on another machine or CPU than its state's last (run_on),
 * a RunState without its CPU. Its end is _Run.finish's too (the lookups compiled code did
 * counted, the values it reached forgotten), and where a callback registered the frames, the
 * run's own ``unregister``; a run that stopped (an error, the budget) ends in
 * NativeProgram.failed, which raises.
 */
#include "_cache_model.h"
#include "_int_cache.h"

typedef uint64_t (*native_function)(void *, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

/* The words of a run's state this reads and writes (native.py's layout, handed over by
 * NativeEntry's maker), and the values some take */
enum {
	L_COUNT, L_BUDGET, L_NEXT_REGION, L_STATUS, L_FAULT_PC, L_DEPTH, L_RS_MEM,
	L_RS_VALUE_REGIONS, L_PID_TGID, L_CHARGES, L_RECORD_SLOT, L_CHARGES_NATIVE, L_CTX_REGION,
	L_READ_ONLY, L_STATUS_OK, L_VALUE_TABLE, L_VALUE_SLOTS, L_MAP_WORDS, LAYOUT_WORDS
};

typedef struct {
	PyObject_HEAD
	vectorcallfunc vectorcall;
	native_function function;
	PyObject *free;        /* the program's free runs (_Run), a list */
	PyObject *python;      /* the Python run_native, the reference */
	PyObject *failed;      /* NativeProgram.failed(rs, status, error, fault_pc): raises */
	PyObject *ctx_region;  /* CTX_REGION, the key of a run's context in rs.mem */
	int keeps_gil, reads_task, native_values;
	uint64_t layout[LAYOUT_WORDS];
} NativeEntry;

enum { RS_COUNT, RS_BUDGET, RS_NEXT_REGION, RS_MEM, RS_VALUE_REGIONS, RS_MACHINE, RS_CPU,
       RS_FIELDS };
static SlotField rs_fields[RS_FIELDS];
enum { RUN_ADDRESS, RUN_RS, RUN_ERROR, RUN_MACHINE, RUN_CPU, RUN_EXPORTED, RUN_REGISTERED,
       RUN_LOOKUP_STATS, RUN_FIELDS };
static SlotField run_fields[RUN_FIELDS];
static PyObject *s_current_pid_tgid, *s_unregister, *s_cpu, *s_current, *s_task;

static int bind_fields(void)
{
	static const SlotFieldOf rs_of[RS_FIELDS] = {
		[RS_COUNT] = {"RunState", "count"}, [RS_BUDGET] = {"RunState", "budget"},
		[RS_NEXT_REGION] = {"RunState", "next_region"}, [RS_MEM] = {"RunState", "mem"},
		[RS_VALUE_REGIONS] = {"RunState", "value_regions"},
		[RS_MACHINE] = {"RunState", "machine"}, [RS_CPU] = {"RunState", "cpu"},
	};
	static const SlotFieldOf run_of[RUN_FIELDS] = {
		[RUN_ADDRESS] = {"_Run", "address"}, [RUN_RS] = {"_Run", "rs"},
		[RUN_ERROR] = {"_Run", "error"}, [RUN_MACHINE] = {"_Run", "machine"},
		[RUN_CPU] = {"_Run", "cpu"},
		[RUN_EXPORTED] = {"_Run", "exported"}, [RUN_REGISTERED] = {"_Run", "registered"},
		[RUN_LOOKUP_STATS] = {"_Run", "lookup_stats"},
	};
	return slot_fields_bind(rs_fields, rs_of, RS_FIELDS, "pybpf.emulated.prog.memory") < 0
		|| slot_fields_bind(run_fields, run_of, RUN_FIELDS,
				    "pybpf.emulated.prog.native") < 0 ? -1 : 0;
}

/* obj.<field> as a u64 (an int field), or -1 with an exception */
static int field_u64(const SlotField *f, PyObject *obj, uint64_t *out)
{
	PyObject *value = slot_field_get(f, obj);
	if (value == NULL)
		return -1;
	/* a loop over its digits (LP64: unsigned long is 64 bits), where unsigned long long's
	 * goes through a byte array for an int of more than one digit (2**30 and up: a region
	 * number) */
#if ULONG_MAX == UINT64_MAX
	*out = PyLong_AsUnsignedLong(value);
#else
	*out = PyLong_AsUnsignedLongLong(value);
#endif
	Py_DECREF(value);
	return *out == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

/* obj.<field> = value (u64), the int from ``ints`` (a run's count and next region are
 * the same at every run of a program that takes the same path): 0, or -1 */
static int set_u64(const SlotField *f, PyObject *obj, IntCacheSlot *ints, uint64_t value)
{
	PyObject *number = cached_int(ints, value);
	int rc = number == NULL ? -1 : slot_field_set(f, obj, number);
	Py_XDECREF(number);
	return rc;
}

/* Whether the Python run_native must do this run: no free state, or the last free state's
 * machine and CPU are not the run's (run_on makes them so); -1 with an exception. The CPU
 * is rs.cpu, which run_prog sets as the run begins (machine.current.cpu). */
static int needs_python(NativeEntry *e, PyObject *rs, PyObject *machine, PyObject **run)
{
	Py_ssize_t n = PyList_GET_SIZE(e->free);
	if (n == 0)
		return 1;
	*run = PyList_GET_ITEM(e->free, n - 1);
	PyObject *cpu = NULL, *last = NULL, *last_cpu = NULL;
	int rc = -1;
	if ((cpu = slot_field_get(&rs_fields[RS_CPU], rs)) == NULL
	    || (last = slot_field_get(&run_fields[RUN_MACHINE], *run)) == NULL
	    || (last_cpu = slot_field_get(&run_fields[RUN_CPU], *run)) == NULL)
		goto out;
	if (machine == Py_None) {  /* run_on(None): CPU 0 */
		long n = PyLong_AsLong(last_cpu);
		rc = n == -1 && PyErr_Occurred() ? -1 : last != Py_None || n != 0;
	} else if (cpu == Py_None || last != machine) {
		rc = 1;
	} else {
		rc = PyObject_RichCompareBool(cpu, last_cpu, Py_NE);
	}
out:
	Py_XDECREF(cpu);
	Py_XDECREF(last);
	Py_XDECREF(last_cpu);
	return rc;
}

/* Machine.current_pid_tgid of ``machine`` in *pid_tgid: from the task set_task gave the
 * calling thread (machine.current.task, a (tgid, pid) tuple) without a Python frame, else by
 * the method. 0, or -1 with an exception. */
static int task_of(PyObject *machine, uint64_t *pid_tgid)
{
	PyObject *current = own_attr(machine, s_current);
	PyObject *task = current == NULL ? NULL : PyObject_GetAttr(current, s_task);
	Py_XDECREF(current);
	if (task != NULL && PyTuple_CheckExact(task) && PyTuple_GET_SIZE(task) == 2) {
		uint64_t tgid = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(task, 0));
		uint64_t pid = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(task, 1));
		*pid_tgid = tgid << 32 | (pid & 0xffffffffu);
		Py_DECREF(task);
		return PyErr_Occurred() ? -1 : 0;
	}
	Py_XDECREF(task);
	PyErr_Clear();
	PyObject *value = PyObject_CallMethodNoArgs(machine, s_current_pid_tgid);
	*pid_tgid = value == NULL ? 0 : PyLong_AsUnsignedLongLongMask(value);
	Py_XDECREF(value);
	return PyErr_Occurred() ? -1 : 0;
}

/* The run's state filled from rs (on ``machine``, rs.machine) for a run: 0, or -1 with an
 * exception */
static int run_begin(NativeEntry *e, PyObject *rs, PyObject *machine, PyObject *run,
		     uint64_t *st)
{
	const uint64_t *l = e->layout;
	PyObject *mem = NULL, *values = NULL;
	int rc = -1;
	if (field_u64(&rs_fields[RS_COUNT], rs, &st[l[L_COUNT]]) < 0
	    || field_u64(&rs_fields[RS_BUDGET], rs, &st[l[L_BUDGET]]) < 0
	    || field_u64(&rs_fields[RS_NEXT_REGION], rs, &st[l[L_NEXT_REGION]]) < 0
	    || (mem = slot_field_get(&rs_fields[RS_MEM], rs)) == NULL
	    || (values = slot_field_get(&rs_fields[RS_VALUE_REGIONS], rs)) == NULL
	    || slot_field_set(&run_fields[RUN_RS], run, rs) < 0)
		goto out;
	st[l[L_STATUS]] = l[L_STATUS_OK];
	st[l[L_DEPTH]] = 0;
	/* the run holds rs, which holds both: their ids stay theirs */
	st[l[L_RS_MEM]] = (uint64_t)(uintptr_t)mem;
	st[l[L_RS_VALUE_REGIONS]] = (uint64_t)(uintptr_t)values;
	/* _Run.reach_record: a tracepoint's record (bytes, which never move), read-only (a
	 * record left out is read through Python) */
	PyObject *ctx = PyDict_CheckExact(mem) ? PyDict_GetItemWithError(mem, e->ctx_region)
		: NULL;
	if (PyErr_Occurred())
		goto out;
	if (e->native_values && ctx != NULL && PyBytes_CheckExact(ctx) && PyBytes_GET_SIZE(ctx)) {
		uint64_t *record = &st[l[L_RECORD_SLOT]];
		record[0] = l[L_CTX_REGION];
		record[1] = (uint64_t)(uintptr_t)PyBytes_AS_STRING(ctx);
		record[2] = (uint64_t)PyBytes_GET_SIZE(ctx) | l[L_READ_ONLY];
	}
	if (e->reads_task) {
		uint64_t pid_tgid = 0;
		if (machine != Py_None && task_of(machine, &pid_tgid) < 0)
			goto out;
		st[l[L_PID_TGID]] = pid_tgid;
	}
	rc = 0;
out:
	Py_XDECREF(mem);
	Py_XDECREF(values);
	return rc;
}

/* The native lookups of a map counted into its access statistics on its machine's running
 * CPU (``entry``: a NativeProgram.lookup_stats entry, (at, machine, current, local, remote),
 * the counts memoryviews of int64): the run's CPU where the map is on the run's machine
 * (``machine``, the run's ``cpu``), as it is but for a program given another machine's map */
static int count_lookups(PyObject *entry, PyObject *machine, PyObject *cpu_obj,
			 uint64_t local, uint64_t remote)
{
	PyObject *cpu_of_map = PyTuple_GET_ITEM(entry, 1) == machine ? Py_NewRef(cpu_obj)
		: PyObject_GetAttr(PyTuple_GET_ITEM(entry, 2), s_cpu);
	Py_ssize_t cpu = cpu_of_map == NULL ? -1 : PyLong_AsSsize_t(cpu_of_map);
	Py_XDECREF(cpu_of_map);
	if (cpu < 0 && PyErr_Occurred())
		return -1;
	PyObject *local_view = PyTuple_GET_ITEM(entry, 3), *remote_view = PyTuple_GET_ITEM(entry, 4);
	if (!PyMemoryView_Check(local_view) || !PyMemoryView_Check(remote_view)) {
		PyErr_SetString(PyExc_TypeError, "a lookup_stats entry's counts are memoryviews");
		return -1;
	}
	Py_buffer *l = PyMemoryView_GET_BUFFER(local_view), *r = PyMemoryView_GET_BUFFER(remote_view);
	if (cpu < 0 || (cpu + 1) * 8 > l->len || (cpu + 1) * 8 > r->len) {
		PyErr_Format(PyExc_IndexError, "CPU %zd has no access counts", cpu);
		return -1;
	}
	((int64_t *)l->buf)[cpu] += (int64_t)local;
	((int64_t *)r->buf)[cpu] += (int64_t)remote;
	return 0;
}

/* _Run.finish: the lookups compiled code did counted into their maps' statistics, the record
 * and the map values forgotten (their region numbers are this run's): 0, or -1 */
static int run_finish(NativeEntry *e, PyObject *rs, PyObject *run, uint64_t *st)
{
	const uint64_t *l = e->layout;
	PyObject *exported = slot_field_get(&run_fields[RUN_EXPORTED], run);
	PyObject *stats = slot_field_get(&run_fields[RUN_LOOKUP_STATS], run);
	PyObject *machine = NULL, *cpu = NULL;
	int rc = -1;
	if (exported == NULL || stats == NULL || !PyDict_CheckExact(exported)
	    || !PyTuple_CheckExact(stats)) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "a native run's exported is a dict, its "
					"lookup_stats a tuple");
		goto out;
	}
	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(stats); i++) {
		PyObject *entry = PyTuple_GET_ITEM(stats, i);
		Py_ssize_t word = PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 5
			? PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 0)) : -1;
		if (word < 0) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_TypeError, "a lookup_stats entry is "
						"(at, machine, current, local, remote)");
			goto out;
		}
		if (!st[word + 2])  /* nothing in the map's cache: no lookups counted either */
			continue;
		if (st[word] || st[word + 1]) {
			if (machine == NULL
			    && ((machine = slot_field_get(&rs_fields[RS_MACHINE], rs)) == NULL
				|| (cpu = slot_field_get(&rs_fields[RS_CPU], rs)) == NULL))
				goto out;
			if (count_lookups(entry, machine, cpu, st[word], st[word + 1]) < 0)
				goto out;
		}
		memset(&st[word], 0, l[L_MAP_WORDS] * sizeof(uint64_t));
	}
	if (st[l[L_RECORD_SLOT]] == l[L_CTX_REGION])  /* the record is this run's */
		st[l[L_RECORD_SLOT]] = 0;
	if (PyDict_GET_SIZE(exported)) {
		memset(&st[l[L_VALUE_TABLE]], 0, 3 * l[L_VALUE_SLOTS] * sizeof(uint64_t));
		PyDict_Clear(exported);
	}
	rc = 0;
out:
	Py_XDECREF(exported);
	Py_XDECREF(stats);
	Py_XDECREF(machine);
	Py_XDECREF(cpu);
	return rc;
}

/* What run_native's ``finally`` does: the run's frames out of rs.mem (its Python
 * ``unregister``, where a callback put them there), run_finish, the count and next region
 * handed back; the run's error (a new reference) in *error */
static int run_end(NativeEntry *e, PyObject *rs, PyObject *run, uint64_t *st,
		   PyObject **error)
{
	const uint64_t *l = e->layout;
	PyObject *registered = slot_field_get(&run_fields[RUN_REGISTERED], run);
	int used = registered == NULL ? -1 : PyObject_IsTrue(registered), rc = 0;
	Py_XDECREF(registered);
	if (used != 0)
		rc = used < 0 ? -1 : call_method(run, s_unregister);
	if (run_finish(e, rs, run, st) < 0)
		rc = -1;
	static IntCacheSlot counts[INT_CACHE_SLOTS], next_regions[INT_CACHE_SLOTS];
	if (set_u64(&rs_fields[RS_COUNT], rs, counts, st[l[L_COUNT]]) < 0
	    || set_u64(&rs_fields[RS_NEXT_REGION], rs, next_regions, st[l[L_NEXT_REGION]]) < 0)
		rc = -1;
	*error = slot_field_get(&run_fields[RUN_ERROR], run);
	if (*error == NULL
	    || slot_field_set(&run_fields[RUN_RS], run, Py_None) < 0
	    || slot_field_set(&run_fields[RUN_ERROR], run, Py_None) < 0)
		rc = -1;
	return rc;
}

static PyObject *native_entry_call(PyObject *op, PyObject *const *args, size_t nargsf,
				   PyObject *kwnames)
{
	NativeEntry *e = (NativeEntry *)op;
	Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
	uint64_t r[5];
	if (nargs != 6 || kwnames != NULL) {
		PyErr_SetString(PyExc_TypeError, "a native entry takes (rs, r1, r2, r3, r4, r5)");
		return NULL;
	}
	PyObject *rs = args[0], *run = NULL, *error = NULL, *result = NULL;
	PyObject *machine = bind_fields() < 0 ? NULL : slot_field_get(&rs_fields[RS_MACHINE], rs);
	int python = machine == NULL ? -1 : needs_python(e, rs, machine, &run);
	if (python != 0) {
		if (python > 0)
			result = PyObject_Vectorcall(e->python, args, nargsf, kwnames);
		goto out;
	}
	for (int i = 0; i < 5; i++) {
		r[i] = PyLong_AsUnsignedLongLongMask(args[i + 1]);
		if (r[i] == (uint64_t)-1 && PyErr_Occurred())
			goto out;
	}
	uint64_t address;
	if (field_u64(&run_fields[RUN_ADDRESS], run, &address) < 0)
		goto out;
	uint64_t *st = (uint64_t *)(uintptr_t)address;
	/* the run's state is out of the free list while it runs (a callback may run the
	 * program again) */
	Py_INCREF(run);
	if (PyList_SetSlice(e->free, PyList_GET_SIZE(e->free) - 1, PyList_GET_SIZE(e->free),
			    NULL) < 0) {
		Py_DECREF(run);
		goto out;
	}
	int begun = run_begin(e, rs, machine, run, st);
	uint64_t r0 = 0;
	if (begun == 0) {
		native_function function = e->function;
		if (e->keeps_gil || st[e->layout[L_CHARGES]] == e->layout[L_CHARGES_NATIVE]) {
			r0 = function(st, r[0], r[1], r[2], r[3], r[4]);
		} else {
			Py_BEGIN_ALLOW_THREADS
			r0 = function(st, r[0], r[1], r[2], r[3], r[4]);
			Py_END_ALLOW_THREADS
		}
	}
	/* what failed before the call is raised after the run is put back */
	PyObject *type = NULL, *value = NULL, *traceback = NULL;
	if (begun < 0)
		PyErr_Fetch(&type, &value, &traceback);
	int ended = run_end(e, rs, run, st, &error);
	uint64_t status = st[e->layout[L_STATUS]];
	if (PyList_Append(e->free, run) < 0)
		ended = -1;
	Py_DECREF(run);
	if (begun < 0) {
		PyErr_Restore(type, value, traceback);
	} else if (ended == 0 && status != e->layout[L_STATUS_OK]) {
		PyObject *status_obj = PyLong_FromUnsignedLongLong(status);
		PyObject *pc = PyLong_FromUnsignedLongLong(st[e->layout[L_FAULT_PC]]);
		if (status_obj != NULL && pc != NULL)
			result = PyObject_Vectorcall(e->failed,
						     (PyObject *[]){rs, status_obj, error, pc}, 4,
						     NULL);
		Py_XDECREF(status_obj);
		Py_XDECREF(pc);
	} else if (ended == 0) {
		result = PyLong_FromUnsignedLongLong(r0);
	}
	Py_XDECREF(error);
out:
	Py_XDECREF(machine);
	return result;
}

/* NativeEntry(function, free, python, failed, layout, keeps_gil, reads_task, native_values) */
static PyObject *native_entry_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
	unsigned long long function;
	PyObject *free, *python, *failed, *layout;
	int keeps_gil, reads_task, native_values;
	if (!PyArg_ParseTuple(args, "KO!OOO!ppp:NativeEntry", &function, &PyList_Type, &free,
			      &python, &failed, &PyTuple_Type, &layout, &keeps_gil, &reads_task,
			      &native_values))
		return NULL;
	if (function == 0 || PyTuple_GET_SIZE(layout) != LAYOUT_WORDS) {
		PyErr_Format(PyExc_ValueError, "NativeEntry: a function and %d layout words",
			     LAYOUT_WORDS);
		return NULL;
	}
	NativeEntry *e = (NativeEntry *)type->tp_alloc(type, 0);
	if (e == NULL)
		return NULL;
	e->vectorcall = native_entry_call;
	e->function = (native_function)(uintptr_t)function;
	e->free = Py_NewRef(free);
	e->python = Py_NewRef(python);
	e->failed = Py_NewRef(failed);
	e->keeps_gil = keeps_gil;
	e->reads_task = reads_task;
	e->native_values = native_values;
	for (int i = 0; i < LAYOUT_WORDS; i++) {
		e->layout[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(layout, i));
		if (PyErr_Occurred()) {
			Py_DECREF(e);
			return NULL;
		}
	}
	if ((e->ctx_region = PyLong_FromUnsignedLongLong(e->layout[L_CTX_REGION])) == NULL) {
		Py_DECREF(e);
		return NULL;
	}
	return (PyObject *)e;
}

static int native_entry_traverse(PyObject *op, visitproc visit, void *arg)
{
	NativeEntry *e = (NativeEntry *)op;
	Py_VISIT(e->free);
	Py_VISIT(e->python);
	Py_VISIT(e->failed);
	return 0;
}

static int native_entry_clear(PyObject *op)
{
	NativeEntry *e = (NativeEntry *)op;
	Py_CLEAR(e->free);
	Py_CLEAR(e->python);
	Py_CLEAR(e->failed);
	Py_CLEAR(e->ctx_region);
	return 0;
}

static void native_entry_dealloc(PyObject *op)
{
	PyObject_GC_UnTrack(op);
	native_entry_clear(op);
	Py_TYPE(op)->tp_free(op);
}

PyTypeObject NativeEntryType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pybpf._cache_model.NativeEntry",
	.tp_basicsize = sizeof(NativeEntry),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
	.tp_doc = "A native-tier program's entry, f(rs, r1, r2, r3, r4, r5) -> r0, its run's "
		  "state filled and handed back in C (native.py's run_native, which it calls "
		  "where that is not the common path).",
	.tp_new = native_entry_new,
	.tp_call = PyVectorcall_Call,
	.tp_vectorcall_offset = offsetof(NativeEntry, vectorcall),
	.tp_traverse = native_entry_traverse,
	.tp_clear = native_entry_clear,
	.tp_dealloc = native_entry_dealloc,
};

int native_entry_ready(void)
{
	return intern(&s_current_pid_tgid, "current_pid_tgid") < 0
		|| intern(&s_unregister, "unregister") < 0 || intern(&s_cpu, "cpu") < 0
		|| intern(&s_current, "current") < 0 || intern(&s_task, "task") < 0
		|| PyType_Ready(&NativeEntryType) < 0 ? -1 : 0;
}
