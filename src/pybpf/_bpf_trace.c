/*
 * bpf_probe_read_user (kernel/trace/bpf_trace.c: bpf_probe_read_user_common) in C for its
 * common case: R2 bytes of the tasks' user memory (the machine's UserMemory, its blocks in
 * address order) at R3, copied to R1 where that is plain memory of the run (a bytearray
 * region: the stack, mostly). A tracepoint program that reads its syscall's arguments does
 * it on every event, and the Python helper is a few calls and a bisect in Python.
 * Anything else (no bytes, an address out of user space or unmapped, a destination that is
 * not plain memory, a run without a machine) is the Python helper's
 * (pybpf/emulated/prog/bpf_trace.py, the reference), which zeroes the destination, returns
 * -EFAULT or raises as it must.
 *
 * pybpf_native_probe_read_user: the same common case for the native tier's machine code.
 *
 * trace_call_bpf: a tracepoint's programs run on its record (trace_call_bpf's
 * bpf_prog_run_array), each run's RunState copied from a prototype, without the Python
 * frames between the syscall and core.run_prog, which stays the one place a program runs
 * but for a program whose entry is a native one (NativeEntry, _native.c): run_native_prog
 * does what run_prog does around it here, and the run has no Python frame at all.
 */
#include "_cache_model.h"
#include "_int_cache.h"

#define TASK_SIZE_MAX 0x7FFFFFFFF000ULL  /* x86-64, 48-bit virtual addresses */

static PyObject *s_user_memory, *s_machine, *s_prog, *s_executable,
	*s_charge, *s_tracepoint_entry, *s_engine, *s_main_entries,
	*s_current, *s_cpu, *s_static_regions, *s_bpf_insn, *s_count, *s_tracepoints,
	*s_run_state_proto, *s_run_state, *s_timing, *s_modeled, *s_modeled_time, *s_scheduler,
	*s_ever_deferred, *s_bpf_syscall, *s_syscall_connect, *s_syscall_entry, *s_empty_ctx,
	*s_fire_path, *s___dict__;
/* what run_native_prog raises and calls as run_prog does, imported at first use, and the
 * globals of irq_work_run's module, whose _irq_work_used says whether the call has anything
 * to do (irq_work_run's own first test, without its Python frame) */
static PyObject *run_abort, *program_fault, *irq_work_run, *ringbuf_globals, *s_irq_work_used;
/* core.run_prog and memory.CTX_REGION, what _fire hands trace_call_bpf, imported at first
 * use */
static PyObject *run_prog, *ctx_region;
static PyObject *python_helper;  /* bpf_trace.bpf_probe_read_user, imported at first use */

/* What a system's firings read that is set once, when the system is made: its machine, the
 * machine's timing and per-thread ``current``, whether time is modeled (machine.modeled_time,
 * timing.modeled); kept on the system (its _fire_path) so that no firing looks them up
 * again. With it, what the runs of the links last fired read of each link (its program's
 * executable, the executable's static regions and main entries: made when the program is
 * loaded), while that tuple is the one fired (attaching or detaching makes a new one); the
 * engine of the prototype RunState last used (a new engine or budget makes a new prototype);
 * the hash of the tracepoint key last fired (a tuple's hash is made at every lookup); and of
 * each link a RunState to run its program again in. */
typedef struct {
	PyObject_HEAD
	PyObject *machine, *timing, *current;
	int modeled_time, timing_modeled;
	/* the thread state (by its id, which no other one gets) that last read current, and
	 * its own dict of the thread-local (current.__dict__ there: the scheduler swaps a
	 * task's contents into it): a read there without the thread-local's own lookups */
	uint64_t current_reader;
	PyObject *current_dict;
	PyObject *key;       /* the key last fired, held: its address stays its own */
	Py_hash_t key_hash;
	PyObject *links;     /* the links last fired, and of each (exe, static_regions, */
	PyObject *programs;  /* main_entries), a tuple */
	PyObject *proto, *engine;  /* the prototype last used and its env's engine */
	/* of each of the links, a native run's RunState that nothing held after its run (else
	 * None), for the program's next run from the prototype (run_state_clean): a list */
	PyObject *spares;
} FirePath;

static int fire_path_traverse(PyObject *op, visitproc visit, void *arg)
{
	FirePath *p = (FirePath *)op;
	Py_VISIT(p->machine);
	Py_VISIT(p->timing);
	Py_VISIT(p->current);
	Py_VISIT(p->current_dict);
	Py_VISIT(p->key);
	Py_VISIT(p->links);
	Py_VISIT(p->programs);
	Py_VISIT(p->proto);
	Py_VISIT(p->engine);
	Py_VISIT(p->spares);
	return 0;
}

static int fire_path_clear(PyObject *op)
{
	FirePath *p = (FirePath *)op;
	Py_CLEAR(p->machine);
	Py_CLEAR(p->timing);
	Py_CLEAR(p->current);
	Py_CLEAR(p->current_dict);
	Py_CLEAR(p->key);
	Py_CLEAR(p->links);
	Py_CLEAR(p->programs);
	Py_CLEAR(p->proto);
	Py_CLEAR(p->engine);
	Py_CLEAR(p->spares);
	return 0;
}

static void fire_path_dealloc(PyObject *op)
{
	PyObject_GC_UnTrack(op);
	fire_path_clear(op);
	Py_TYPE(op)->tp_free(op);
}

static PyTypeObject FirePathType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pybpf._cache_model.FirePath",
	.tp_basicsize = sizeof(FirePath),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "What a system's tracepoint firings read that is set once (_bpf_trace.c).",
	.tp_traverse = fire_path_traverse,
	.tp_clear = fire_path_clear,
	.tp_dealloc = fire_path_dealloc,
};

int bpf_trace_ready(void)
{
	return intern(&s_user_memory, "user_memory") < 0 || intern(&s_machine, "machine") < 0
		|| intern(&s_prog, "prog") < 0 || intern(&s_executable, "executable") < 0
		|| intern(&s_charge, "charge") < 0
		|| intern(&s_tracepoint_entry, "tracepoint_entry") < 0
		|| intern(&s_engine, "engine") < 0
		|| intern(&s_main_entries, "main_entries") < 0
		|| intern(&s_current, "current") < 0 || intern(&s_cpu, "cpu") < 0
		|| intern(&s___dict__, "__dict__") < 0
		|| intern(&s_static_regions, "static_regions") < 0
		|| intern(&s_bpf_insn, "bpf_insn") < 0 || intern(&s_count, "count") < 0
		|| intern(&s_tracepoints, "_tracepoints") < 0
		|| intern(&s_run_state_proto, "_run_state_proto") < 0
		|| intern(&s_run_state, "_run_state") < 0 || intern(&s_timing, "timing") < 0
		|| intern(&s_modeled, "modeled") < 0 || intern(&s_modeled_time, "modeled_time") < 0
		|| intern(&s_scheduler, "_scheduler") < 0
		|| intern(&s_ever_deferred, "ever_deferred") < 0
		|| intern(&s_bpf_syscall, "bpf_syscall") < 0
		|| intern(&s_irq_work_used, "_irq_work_used") < 0
		|| intern(&s_syscall_connect, "syscall_connect") < 0
		|| intern(&s_syscall_entry, "syscall_entry") < 0
		|| intern(&s_fire_path, "_fire_path") < 0
		|| PyType_Ready(&FirePathType) < 0
		|| (s_empty_ctx == NULL
		    && (s_empty_ctx = PyBytes_FromStringAndSize(NULL, 0)) == NULL) ? -1 : 0;
}

/* A UserMemory's (emulated/machine/machine.py) lists of block addresses and blocks, its
 * slots read at their offsets */
enum { USER_STARTS, USER_BLOCKS, USER_FIELDS };
static SlotField user_fields[USER_FIELDS];
static const SlotFieldOf user_fields_of[USER_FIELDS] = {
	[USER_STARTS] = {"UserMemory", "_starts"}, [USER_BLOCKS] = {"UserMemory", "_blocks"}};

/* The user block holding [addr, addr + size) and the offset there (a new reference), or NULL
 * without an exception where there is none (the Python helper then says what happens) */
static PyObject *user_block(PyObject *machine, uint64_t addr, uint64_t size, Py_ssize_t *off)
{
	PyObject *memory = own_attr(machine, s_user_memory), *starts = NULL;
	PyObject *blocks = NULL, *block = NULL;
	if (memory == NULL || slot_fields_bind(user_fields, user_fields_of, USER_FIELDS,
					       "pybpf.emulated.machine.machine") < 0
	    || (starts = slot_field_get(&user_fields[USER_STARTS], memory)) == NULL
	    || (blocks = slot_field_get(&user_fields[USER_BLOCKS], memory)) == NULL)
		goto out;
	if (!PyList_Check(starts) || !PyList_Check(blocks)
	    || PyList_GET_SIZE(starts) != PyList_GET_SIZE(blocks))
		goto out;
	/* bisect_right(starts, addr) - 1 */
	Py_ssize_t lo = 0, hi = PyList_GET_SIZE(starts);
	while (lo < hi) {
		Py_ssize_t mid = (lo + hi) / 2;
		uint64_t start;
		if (parse_addr(PyList_GET_ITEM(starts, mid), &start) < 0)
			goto out;
		if (addr < start)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (lo == 0)
		goto out;
	uint64_t start;
	PyObject *found = PyList_GET_ITEM(blocks, lo - 1);
	if (parse_addr(PyList_GET_ITEM(starts, lo - 1), &start) < 0 || !PyBytes_CheckExact(found)
	    || addr - start + size > (uint64_t)PyBytes_GET_SIZE(found))
		goto out;
	*off = (Py_ssize_t)(addr - start);
	block = Py_NewRef(found);
out:
	Py_XDECREF(memory);
	Py_XDECREF(starts);
	Py_XDECREF(blocks);
	return block;
}

/* obj.<name> of module ``module`` (a new reference), or NULL */
static PyObject *import_name(const char *module, const char *name)
{
	PyObject *mod = PyImport_ImportModule(module);
	PyObject *found = mod == NULL ? NULL : PyObject_GetAttrString(mod, name);
	Py_XDECREF(mod);
	return found;
}

/* probe_read_user(rs, r1, r2, r3, r4, r5) -> r0: bpf_probe_read_user */
PyObject *probe_read_user(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 6) {
		PyErr_SetString(PyExc_TypeError, "probe_read_user(rs, r1, r2, r3, r4, r5)");
		return NULL;
	}
	PyObject *rs = args[0], *machine = NULL, *block = NULL, *mem = NULL;
	PyObject *result = NULL;
	uint64_t dst, size, src;
	Py_ssize_t off = 0;
	if (bind_run_state_type() < 0 || parse_addr(args[1], &dst) < 0
	    || parse_addr(args[2], &size) < 0 || parse_addr(args[3], &src) < 0)
		return NULL;
	size &= 0xffffffffu;
	if (size == 0 || src > TASK_SIZE_MAX || size > TASK_SIZE_MAX - src
	    || (machine = run_machine(rs)) == NULL)
		goto python;
	if (machine == Py_None || (block = user_block(machine, src, size, &off)) == NULL
	    || (mem = run_regions(rs)) == NULL || !PyDict_CheckExact(mem))
		goto python;
	PyObject *region = region_at(mem, dst);
	uint64_t at = dst & 0xffffffffu;
	if (region == NULL || !PyByteArray_CheckExact(region)
	    || at + size > (uint64_t)PyByteArray_GET_SIZE(region))
		goto python;
	memcpy(PyByteArray_AS_STRING(region) + at, PyBytes_AS_STRING(block) + off, size);
	result = PyLong_FromLong(0);
	goto out;
python:
	if (!PyErr_Occurred()) {
		if (python_helper == NULL)
			python_helper = import_name("pybpf.emulated.prog.bpf_trace",
						    "bpf_probe_read_user");
		if (python_helper != NULL)
			result = PyObject_Vectorcall(python_helper, args, 6, NULL);
	}
out:
	Py_XDECREF(machine);
	Py_XDECREF(block);
	Py_XDECREF(mem);
	return result;
}

/* bpf_probe_read_user from the native tier's machine code: the ``size`` bytes of user memory
 * at ``src`` copied to ``dst`` (native memory of the run, writable) with the GIL taken: 0, or
 * PROBE_SLOW where the common case does not hold (nothing copied: the callback's Python
 * helper then does it, faults and errors included). ``machine`` is the run's (NULL: none). */
#define PROBE_SLOW UINT64_MAX
uint64_t pybpf_native_probe_read_user(PyObject *machine, char *dst, uint64_t size,
				      uint64_t src)
{
	size &= 0xffffffffu;
	if (machine == NULL || dst == NULL || size == 0 || src > TASK_SIZE_MAX
	    || size > TASK_SIZE_MAX - src)
		return PROBE_SLOW;
	HelperGil gil = helper_gil_take();
	Py_ssize_t off = 0;
	PyObject *block = user_block(machine, src, size, &off);
	uint64_t r0 = PROBE_SLOW;
	if (block != NULL) {
		memcpy(dst, PyBytes_AS_STRING(block) + off, size);
		Py_DECREF(block);
		r0 = 0;
	}
	PyErr_Clear();  /* what failed, the Python helper meets again and reports */
	helper_gil_give(gil);
	return r0;
}

/* A new RunState like ``proto``: each of its slots the prototype's value, a dict or a list
 * a copy of the prototype's (a run's regions, values and trace are its own), without the
 * Python __init__: what RunState(env) gives where ``proto`` is one */
static PyObject *run_state_copy(PyObject *proto)
{
	PyTypeObject *type = Py_TYPE(proto);
	PyObject *rs = type->tp_alloc(type, 0);
	if (rs == NULL)
		return NULL;
	for (PyMemberDef *m = type->tp_members; m != NULL && m->name != NULL; m++) {
		if (m->type != T_OBJECT_EX)
			continue;
		PyObject *value = *(PyObject **)((char *)proto + m->offset);
		if (value != NULL && PyDict_CheckExact(value))
			value = PyDict_Copy(value);
		else if (value != NULL && PyList_CheckExact(value))
			value = PyList_GetSlice(value, 0, PyList_GET_SIZE(value));
		else
			Py_XINCREF(value);
		if (value == NULL && PyErr_Occurred()) {
			Py_DECREF(rs);
			return NULL;
		}
		*(PyObject **)((char *)rs + m->offset) = value;
	}
	return rs;
}

/* ``key`` taken out of the dict ``d`` where it is there: 0, or -1 with an exception */
static int dict_discard(PyObject *d, PyObject *key)
{
#if PY_VERSION_HEX >= 0x030D0000
	return PyDict_Pop(d, key, NULL) < 0 ? -1 : 0;
#else
	PyObject *value = _PyDict_Pop(d, key, Py_None);
	Py_XDECREF(value);
	return value == NULL ? -1 : 0;
#endif
}

/* at most this many regions added by a run are taken out by number (each a dict lookup);
 * more, by a scan of all its regions */
#define ADDED_BY_NUMBER 32
/* their numbers, the same at every run */
static IntCacheSlot added_regions[INT_CACHE_SLOTS];

/* ``rs``, a native run's RunState from ``proto`` that nothing else holds since its run
 * ended, made again what run_state_copy(proto) and the program's static regions give, for
 * the program's next run (which sets its record): the regions the run added (numbered
 * from the prototype's next_region on) taken out, each other slot the prototype's, a dict
 * or list an empty one of its own (``statics`` are the program's static regions). Done as
 * the run ends, so that nothing the run reached (a map value's view, which keeps a shared
 * segment mapped) outlives it. A run's RunState was mostly its dict of static regions,
 * made and freed at every run. 1, 0 where ``rs`` is not as that says (it is not used
 * again), or -1 with an exception. */
static int run_state_clean(PyObject *rs, PyObject *proto, PyObject *statics)
{
	PyTypeObject *type = Py_TYPE(rs);
	PyObject *mem = run_regions(rs), *proto_mem = run_regions(proto);
	PyObject *base = run_next_region(proto), *added = NULL;
	int rc = -1;
	if (mem == NULL || proto_mem == NULL || base == NULL)
		goto out;
	rc = 0;
	/* the slot and ours: nothing else holds the regions */
	if (type != Py_TYPE(proto) || !PyDict_CheckExact(mem) || Py_REFCNT(mem) != 2
	    || !PyDict_CheckExact(proto_mem) || PyDict_GET_SIZE(proto_mem) != 0
	    || !PyLong_CheckExact(base))
		goto out;
	rc = -1;
	Py_ssize_t first = PyLong_AsSsize_t(base);
	if (first < 0) {
		if (!PyErr_Occurred())
			rc = 0;  /* not a region number: the run state is not used again */
		goto out;
	}
	/* nothing added where the regions are the program's static ones and its record (a run
	 * takes out only what it added; a frame takes a number, not a region) */
	Py_ssize_t clean_size = PyDict_CheckExact(statics) ? PyDict_GET_SIZE(statics) + 1 : -1;
	/* else the regions the run added, numbered from first to its next_region: taken out by
	 * number where they are few, then (where some are left) found by a scan */
	PyObject *next = PyDict_GET_SIZE(mem) == clean_size ? NULL : run_next_region(rs);
	Py_ssize_t last = next != NULL && PyLong_CheckExact(next) ? PyLong_AsSsize_t(next) : first;
	Py_XDECREF(next);
	if (PyErr_Occurred()) {
		PyErr_Clear();  /* not a number: the scan finds what was added */
		last = first;
	}
	if (last - first > ADDED_BY_NUMBER)
		last = first;  /* many: the scan finds them */
	/* the last first, until only the static ones and the record are left: the run's first
	 * number is its frame's, which has no region (a miss walks the table's deleted slots) */
	for (Py_ssize_t number = last - 1; number >= first && PyDict_GET_SIZE(mem) != clean_size;
	     number--) {
		PyObject *key = cached_int(added_regions, (uint64_t)number);
		if (key == NULL || dict_discard(mem, key) < 0) {
			Py_XDECREF(key);
			goto out;
		}
		Py_DECREF(key);
	}
	int same = PyDict_GET_SIZE(mem) == clean_size;
	Py_ssize_t pos = 0;
	PyObject *region, *value;
	while (!same && PyDict_Next(mem, &pos, &region, &value)) {
		Py_ssize_t number = PyLong_CheckExact(region) ? PyLong_AsSsize_t(region) : -1;
		if (number < 0)
			PyErr_Clear();  /* not a region number of the run's */
		else if (number >= first && ((added == NULL && (added = PyList_New(0)) == NULL)
					     || PyList_Append(added, region) < 0))
			goto out;
	}
	for (Py_ssize_t i = 0; added != NULL && i < PyList_GET_SIZE(added); i++)
		if (PyDict_DelItem(mem, PyList_GET_ITEM(added, i)) < 0)
			goto out;
	for (PyMemberDef *m = type->tp_members; m != NULL && m->name != NULL; m++) {
		if (m->type != T_OBJECT_EX)
			continue;
		PyObject **slot = (PyObject **)((char *)rs + m->offset);
		PyObject *want = *(PyObject **)((char *)proto + m->offset), *made;
		if (*slot == mem || *slot == want)
			continue;
		if (want != NULL && (PyDict_CheckExact(want) || PyList_CheckExact(want))) {
			PyObject *now = *slot;
			if (now != NULL && Py_TYPE(now) == Py_TYPE(want) && Py_REFCNT(now) == 1
			    && (PyDict_CheckExact(now) ? PyDict_GET_SIZE(want) == 0
				: PyList_GET_SIZE(want) == 0)) {
				/* only the slot holds it: emptied in place */
				if (PyDict_CheckExact(now))
					PyDict_Clear(now);
				else if (PyList_SetSlice(now, 0, PyList_GET_SIZE(now), NULL) < 0)
					goto out;
				continue;
			}
			made = PyDict_CheckExact(want) ? PyDict_Copy(want)
				: PyList_GetSlice(want, 0, PyList_GET_SIZE(want));
			if (made == NULL)
				goto out;
		} else {
			made = Py_XNewRef(want);
		}
		Py_XSETREF(*slot, made);
	}
	rc = 1;
out:
	Py_XDECREF(mem);
	Py_XDECREF(proto_mem);
	Py_XDECREF(base);
	Py_XDECREF(added);
	return rc;
}

/* bool(obj.name): 1 or 0, or -1 with an exception */
static int attr_truth(PyObject *obj, PyObject *name)
{
	PyObject *value = PyObject_GetAttr(obj, name);
	int truth = value == NULL ? -1 : PyObject_IsTrue(value);
	Py_XDECREF(value);
	return truth;
}

/* The system's FirePath (a new reference), made and kept on it at its first firing; NULL
 * with an exception */
static FirePath *fire_path_of(PyObject *system)
{
	PyObject *found = own_attr(system, s_fire_path);
	if (found != NULL) {
		if (Py_IS_TYPE(found, &FirePathType))
			return (FirePath *)found;
		Py_DECREF(found);
		PyErr_SetString(PyExc_TypeError, "a system's _fire_path is a FirePath");
		return NULL;
	}
	if (!PyErr_ExceptionMatches(PyExc_AttributeError))
		return NULL;
	PyErr_Clear();
	FirePath *p = PyObject_GC_New(FirePath, &FirePathType);
	if (p == NULL)
		return NULL;
	p->machine = p->timing = p->current = p->current_dict = p->key = NULL;
	p->links = p->programs = p->proto = p->engine = NULL;
	p->spares = NULL;
	p->key_hash = -1;
	PyObject_GC_Track(p);
	if ((p->machine = PyObject_GetAttr(system, s_machine)) == NULL
	    || (p->timing = PyObject_GetAttr(p->machine, s_timing)) == NULL
	    || (p->current = PyObject_GetAttr(p->machine, s_current)) == NULL
	    || (p->modeled_time = attr_truth(p->machine, s_modeled_time)) < 0
	    || (p->timing_modeled = attr_truth(p->timing, s_modeled)) < 0
	    || PyObject_SetAttr(system, s_fire_path, (PyObject *)p) < 0) {
		Py_DECREF(p);
		return NULL;
	}
	return p;
}

/* machine.current.cpu on the calling thread (a new reference, or NULL with an exception):
 * from the thread's own dict of the thread-local, kept on ``path`` for the thread state
 * that read it last; by getattr where that dict has none (the class's default) */
static PyObject *current_cpu(FirePath *path)
{
	uint64_t reader = PyThreadState_GetID(PyThreadState_Get());
	if (path->current_dict == NULL || path->current_reader != reader) {
		PyObject *dict = PyObject_GetAttr(path->current, s___dict__);
		if (dict == NULL)
			return NULL;
		if (!PyDict_CheckExact(dict)) {
			Py_DECREF(dict);
			return PyObject_GetAttr(path->current, s_cpu);
		}
		Py_XSETREF(path->current_dict, dict);
		path->current_reader = reader;
	}
	PyObject *cpu = PyDict_GetItemWithError(path->current_dict, s_cpu);  /* borrowed */
	if (cpu != NULL)
		return Py_NewRef(cpu);
	return PyErr_Occurred() ? NULL : PyObject_GetAttr(path->current, s_cpu);
}

/* Of each of ``links``, (exe, exe.static_regions, exe.main_entries) (link.prog.executable),
 * a new tuple, or NULL */
static PyObject *programs_of(PyObject *links)
{
	Py_ssize_t n = PyTuple_GET_SIZE(links);
	PyObject *programs = PyTuple_New(n);
	for (Py_ssize_t i = 0; programs != NULL && i < n; i++) {
		PyObject *prog = PyObject_GetAttr(PyTuple_GET_ITEM(links, i), s_prog);
		PyObject *exe = prog == NULL ? NULL : PyObject_GetAttr(prog, s_executable);
		PyObject *statics = exe == NULL ? NULL : PyObject_GetAttr(exe, s_static_regions);
		PyObject *entries = statics == NULL ? NULL : PyObject_GetAttr(exe, s_main_entries);
		PyObject *program = entries == NULL ? NULL : PyTuple_Pack(3, exe, statics, entries);
		Py_XDECREF(prog);
		Py_XDECREF(exe);
		Py_XDECREF(statics);
		Py_XDECREF(entries);
		if (program == NULL)
			Py_CLEAR(programs);
		else
			PyTuple_SET_ITEM(programs, i, program);
	}
	return programs;
}

/* The program's entry on the run's engine where it is a native one (NativeEntry) and the
 * run's entry maker is set (the prototype's: run_prog sets the same), else NULL (run_prog
 * runs it); a new reference, or NULL with an exception. ``entries`` is exe.main_entries,
 * ``engine`` the run's (rs.env.engine), each NULL where the caller has not got it. */
static PyObject *native_entry_of(PyObject *exe, PyObject *rs, PyObject *entries,
				 PyObject *engine)
{
	PyObject *entry_of = run_entry_of(rs), *env = NULL, *entry = NULL;
	Py_XINCREF(entries);
	Py_XINCREF(engine);
	if (entry_of == NULL || entry_of == Py_None
	    || (engine == NULL && ((env = run_env(rs)) == NULL
				   || (engine = PyObject_GetAttr(env, s_engine)) == NULL))
	    || (entries == NULL && (entries = PyObject_GetAttr(exe, s_main_entries)) == NULL)
	    || !PyDict_CheckExact(entries))
		goto out;
	entry = PyDict_GetItemWithError(entries, engine);
	entry = entry != NULL && Py_IS_TYPE(entry, &NativeEntryType) ? Py_NewRef(entry) : NULL;
out:
	Py_XDECREF(entry_of);
	Py_XDECREF(env);
	Py_XDECREF(engine);
	Py_XDECREF(entries);
	return entry;
}

/* The run's regions given the program's static ones (run_prog's rs.mem.update(static)): a
 * copy of ``statics`` with what rs.mem held beside them (a statics' region keeps its
 * object, as update gives it), which is a copy of a small dict, not an insert per region;
 * 0, or -1 */
static int add_static_regions(PyObject *rs, PyObject *statics)
{
	PyObject *mem = run_regions(rs), *merged = NULL;
	int rc = -1;
	if (mem == NULL)
		return -1;
	if (!PyDict_CheckExact(mem) || !PyDict_CheckExact(statics)) {
		rc = PyObject_IsTrue(statics);
		rc = rc <= 0 ? rc : PyDict_Update(mem, statics);
	} else if (PyDict_GET_SIZE(statics) == 0) {
		rc = 0;
	} else if ((merged = PyDict_Copy(statics)) != NULL && PyDict_Merge(merged, mem, 0) == 0) {
		rc = run_set_regions(rs, merged);
	}
	Py_XDECREF(mem);
	Py_XDECREF(merged);
	return rc;
}

/* core.run_prog(exe, rs) where the program's entry is native (``entry``), from C: the run's
 * CPU, the program's maps among its regions (``statics``, exe.static_regions; there already
 * where ``has_statics``), the run (a RunAbort is R0 0, a RecursionError a fault), then the
 * rings' wake-ups and, with modeled time (``cpu`` not None), its instructions charged; R0,
 * or NULL. ``path`` is the firing system's (NULL: none). */
static PyObject *run_native_prog(PyObject *exe, PyObject *rs, PyObject *entry,
				 PyObject *ctx, PyObject *timing, PyObject *cpu,
				 PyObject *statics, int has_statics, FirePath *path)
{
	PyObject *machine = NULL, *current = NULL, *run_cpu = NULL, *r0 = NULL, *zero = NULL;
	if (run_abort == NULL && (run_abort = import_name("pybpf.emulated.prog.semantics",
							  "RunAbort")) == NULL)
		return NULL;
	if (program_fault == NULL && (program_fault = import_name("pybpf.errors",
								  "ProgramFault")) == NULL)
		return NULL;
	if (irq_work_run == NULL) {
		PyObject *ringbuf = PyImport_ImportModule("pybpf.emulated.maps.ringbuf");
		if (ringbuf == NULL)
			return NULL;
		ringbuf_globals = Py_NewRef(PyModule_GetDict(ringbuf));
		irq_work_run = PyObject_GetAttrString(ringbuf, "irq_work_run");
		Py_DECREF(ringbuf);
		if (irq_work_run == NULL)
			return NULL;
	}
	Py_XINCREF(statics);
	if ((machine = run_machine(rs)) == NULL)
		goto out;
	if (machine != Py_None) {  /* rs.cpu = machine.current.cpu */
		if (path != NULL && path->machine == machine)
			run_cpu = current_cpu(path);
		else if ((current = PyObject_GetAttr(machine, s_current)) != NULL)
			run_cpu = PyObject_GetAttr(current, s_cpu);
		if (run_cpu == NULL || run_set_cpu(rs, run_cpu) < 0)
			goto out;
	}
	if (!has_statics
	    && ((statics == NULL && (statics = PyObject_GetAttr(exe, s_static_regions)) == NULL)
		|| add_static_regions(rs, statics) < 0))
		goto out;
	if ((zero = PyLong_FromLong(0)) == NULL)
		goto out;
	r0 = PyObject_Vectorcall(entry, (PyObject *[]){rs, ctx, zero, zero, zero, zero}, 6, NULL);
	if (r0 == NULL && PyErr_ExceptionMatches(run_abort)) {
		PyErr_Clear();
		r0 = Py_NewRef(zero);
	} else if (r0 == NULL && PyErr_ExceptionMatches(PyExc_RecursionError)) {
		PyErr_Clear();
		PyObject *fault = PyObject_CallFunction(program_fault, "is", EFAULT,
							"the call stack is too deep");
		if (fault != NULL) {
			PyErr_SetObject(program_fault, fault);
			Py_DECREF(fault);
		}
	}
	/* run_prog's finally: what the run raised is raised after it */
	PyObject *type, *value, *traceback;
	PyErr_Fetch(&type, &value, &traceback);
	PyObject *used = PyDict_GetItemWithError(ringbuf_globals, s_irq_work_used);  /* borrowed */
	PyObject *woken = used == Py_False ? Py_NewRef(Py_None)
		: PyErr_Occurred() ? NULL : PyObject_CallNoArgs(irq_work_run), *charged = NULL;
	if (woken != NULL && cpu != Py_None) {
		PyObject *count = PyObject_GetAttr(rs, s_count), *on = PyObject_GetAttr(rs, s_cpu);
		if (count != NULL && on != NULL)
			charged = PyObject_VectorcallMethod(
				s_charge, (PyObject *[]){timing, on, s_bpf_insn, count}, 4, NULL);
		Py_XDECREF(count);
		Py_XDECREF(on);
	}
	int ended = woken != NULL && (cpu == Py_None || charged != NULL);
	Py_XDECREF(woken);
	Py_XDECREF(charged);
	if (!ended) {  /* as a finally block's: its own error replaces the run's */
		Py_XDECREF(type);
		Py_XDECREF(value);
		Py_XDECREF(traceback);
		Py_CLEAR(r0);
	} else if (type != NULL) {
		PyErr_Restore(type, value, traceback);
	}
out:
	Py_XDECREF(machine);
	Py_XDECREF(current);
	Py_XDECREF(run_cpu);
	Py_XDECREF(statics);
	Py_XDECREF(zero);
	return r0;
}

/* trace_call_bpf's runs: each link's program run with ``record`` as region ``ctx_region`` of
 * a RunState copied from ``proto``; ``path`` the firing system's (NULL: none), which keeps
 * what the runs read of ``links`` and of ``proto`` */
static PyObject *call_links(PyObject *links, PyObject *record, PyObject *proto,
			    PyObject *ctx_region, PyObject *run_prog, PyObject *timing,
			    PyObject *cpu, FirePath *path)
{
	Py_ssize_t n = PyTuple_GET_SIZE(links);
	uint64_t region;
	/* R1: the context's pointer, run_prog's default */
	PyObject *ctx = parse_addr(ctx_region, &region) < 0 ? NULL
		: PyLong_FromUnsignedLongLong(region << 32);
	PyObject *retvals = ctx == NULL ? NULL : PyList_New(n), *engine = NULL, *programs = NULL;
	PyObject *spares = NULL;
	if (retvals == NULL || bind_run_state_type() < 0)
		goto fail;
	int new_links = path != NULL && path->links != links;
	if (new_links) {
		PyObject *made = programs_of(links);
		if (made == NULL)
			goto fail;
		Py_XSETREF(path->programs, made);
		Py_XSETREF(path->links, Py_NewRef(links));
	}
	if (path != NULL && path->proto != proto) {
		PyObject *env = run_env(proto);
		engine = env == NULL ? NULL : PyObject_GetAttr(env, s_engine);
		Py_XDECREF(env);
		if (engine == NULL)
			goto fail;
		Py_XSETREF(path->proto, Py_NewRef(proto));
		Py_XSETREF(path->engine, Py_NewRef(engine));
		new_links = 1;  /* the spares were the old prototype's */
	} else if (path != NULL) {
		engine = Py_NewRef(path->engine);
	}
	if (new_links) {
		PyObject *none = PyList_New(n);
		if (none == NULL)
			goto fail;
		for (Py_ssize_t i = 0; i < n; i++)
			PyList_SET_ITEM(none, i, Py_NewRef(Py_None));
		Py_XSETREF(path->spares, none);
	}
	/* held: a run that fires another tracepoint of the system replaces the path's */
	programs = path == NULL ? NULL : Py_NewRef(path->programs);
	spares = path == NULL ? NULL : Py_NewRef(path->spares);
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *prog = NULL, *exe = NULL, *statics = NULL, *entries = NULL;
		PyObject *rs = NULL, *mem = NULL, *r0 = NULL;
		if (cpu != Py_None) {
			PyObject *charged = PyObject_VectorcallMethod(
				s_charge, (PyObject *[]){timing, cpu, s_tracepoint_entry}, 3, NULL);
			if (charged == NULL)
				goto fail;
			Py_DECREF(charged);
		}
		if (path != NULL) {
			PyObject *program = PyTuple_GET_ITEM(programs, i);
			exe = Py_NewRef(PyTuple_GET_ITEM(program, 0));
			statics = PyTuple_GET_ITEM(program, 1);
			entries = PyTuple_GET_ITEM(program, 2);
		} else if ((prog = PyObject_GetAttr(PyTuple_GET_ITEM(links, i), s_prog)) != NULL) {
			exe = PyObject_GetAttr(prog, s_executable);
		}
		int reused = 0;
		if (exe != NULL && spares != NULL && PyList_GET_ITEM(spares, i) != Py_None) {
			/* ours while it runs: a run it makes of the same program keeps its own */
			rs = PyList_GET_ITEM(spares, i);
			PyList_SET_ITEM(spares, i, Py_NewRef(Py_None));
			PyObject *regions = run_regions(rs);
			reused = regions == NULL || PyDict_SetItem(regions, ctx_region, record) < 0
				? -1 : 1;
			Py_XDECREF(regions);
			if (reused < 0)
				Py_CLEAR(rs);
		}
		if (exe != NULL && reused >= 0
		    && (reused || ((rs = run_state_copy(proto)) != NULL
				   && (mem = run_regions(rs)) != NULL
				   && PyDict_SetItem(mem, ctx_region, record) == 0))) {
			PyObject *entry = native_entry_of(exe, rs, entries, engine);
			r0 = entry != NULL
				? run_native_prog(exe, rs, entry, ctx, timing, cpu, statics, reused,
						  path)
				: PyErr_Occurred() ? NULL
				: PyObject_Vectorcall(run_prog, (PyObject *[]){exe, rs}, 2, NULL);
			int clean = r0 != NULL && entry != NULL && spares != NULL
				&& Py_REFCNT(rs) == 1 ? run_state_clean(rs, proto, statics) : 0;
			if (clean > 0) {
				PyObject *left = PyList_GET_ITEM(spares, i);
				PyList_SET_ITEM(spares, i, rs);  /* the list's now */
				rs = NULL;
				Py_DECREF(left);
			} else if (clean < 0) {
				PyErr_Clear();  /* the run is done: its RunState is only not used again */
			}
			Py_XDECREF(entry);
		}
		Py_XDECREF(prog);
		Py_XDECREF(exe);
		Py_XDECREF(rs);
		Py_XDECREF(mem);
		if (r0 == NULL)
			goto fail;
		PyList_SET_ITEM(retvals, i, r0);
	}
	Py_DECREF(ctx);
	Py_XDECREF(engine);
	Py_XDECREF(programs);
	Py_XDECREF(spares);
	return retvals;
fail:
	Py_XDECREF(ctx);
	Py_XDECREF(retvals);
	Py_XDECREF(engine);
	Py_XDECREF(programs);
	Py_XDECREF(spares);
	return NULL;
}

/* trace_call_bpf(links, record, proto, ctx_region, run_prog, timing, cpu) -> [r0, ...]: each
 * link's program (link.prog.executable) run once by ``run_prog(exe, rs)`` with ``record`` as
 * region ``ctx_region`` of a RunState copied from ``proto``; where ``cpu`` is not None,
 * ``timing.charge(cpu, "tracepoint_entry")`` first (progs.py's _fire, the reference) */
PyObject *trace_call_bpf(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 7 || !PyTuple_CheckExact(args[0])) {
		PyErr_SetString(PyExc_TypeError,
				"trace_call_bpf(links: tuple, record, proto, ctx_region, run_prog, "
				"timing, cpu)");
		return NULL;
	}
	return call_links(args[0], args[1], args[2], args[3], args[4], args[5], args[6], NULL);
}

/* ProgramsMixin._fire (progs.py, the reference) in C: the links attached to tracepoint
 * ``key`` when it fires, the record as bytes, the system's prototype RunState (its
 * _run_state() makes one where there is none), the current CPU where time is modeled (else
 * None: nothing charged), then the runs. ``path`` is the system's FirePath where the caller
 * has it, else NULL. */
static PyObject *fire(PyObject *system, PyObject *key, PyObject *ctx, FirePath *path)
{
	PyObject *tracepoints = NULL, *record = NULL, *cpu = NULL, *proto = NULL;
	PyObject *result = NULL;
	if (run_prog == NULL
	    && (run_prog = import_name("pybpf.emulated.prog.core", "run_prog")) == NULL)
		return NULL;
	if (ctx_region == NULL
	    && (ctx_region = import_name("pybpf.emulated.prog.memory", "CTX_REGION")) == NULL)
		return NULL;
	if (path == NULL) {
		if ((path = fire_path_of(system)) == NULL)
			return NULL;
	} else {
		Py_INCREF(path);
	}
	if ((tracepoints = own_attr(system, s_tracepoints)) == NULL
	    || (record = PyBytes_CheckExact(ctx) ? Py_NewRef(ctx)
		: PyObject_CallOneArg((PyObject *)&PyBytes_Type, ctx)) == NULL)
		goto out;
	if (!PyDict_CheckExact(tracepoints)) {
		PyErr_SetString(PyExc_TypeError, "a system's _tracepoints is a dict");
		goto out;
	}
	if (path->key != key) {
		Py_hash_t hash = PyObject_Hash(key);
		if (hash == -1)
			goto out;
		Py_XSETREF(path->key, Py_NewRef(key));
		path->key_hash = hash;
	}
	PyObject *links = _PyDict_GetItem_KnownHash(tracepoints, key, path->key_hash);  /* borrowed */
	if (PyErr_Occurred())
		goto out;
	if (links == NULL || !PyTuple_CheckExact(links) || PyTuple_GET_SIZE(links) == 0) {
		result = links == NULL || PyTuple_CheckExact(links) ? PyList_New(0) : NULL;
		if (result == NULL && !PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "a tracepoint's links are a tuple");
		goto out;
	}
	Py_INCREF(links);  /* as the Python loop holds them: an attach meanwhile makes new ones */
	cpu = path->timing_modeled ? current_cpu(path) : Py_NewRef(Py_None);
	if (cpu != NULL && (proto = own_attr(system, s_run_state_proto)) != NULL
	    && proto == Py_None) {
		Py_SETREF(proto, PyObject_CallMethodNoArgs(system, s_run_state));
	}
	if (proto != NULL)
		result = call_links(links, record, proto, ctx_region, run_prog, path->timing, cpu,
				    path);
	Py_DECREF(links);
out:
	Py_DECREF(path);
	Py_XDECREF(tracepoints);
	Py_XDECREF(record);
	Py_XDECREF(cpu);
	Py_XDECREF(proto);
	return result;
}

/* fire_tracepoint(system, key, ctx) -> [r0, ...]: fire's */
PyObject *fire_tracepoint(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 3) {
		PyErr_SetString(PyExc_TypeError, "fire_tracepoint(system, key, ctx)");
		return NULL;
	}
	return fire(args[0], args[1], args[2], NULL);
}

/* enter_syscall(system, key, ctx, entry) -> [r0, ...]: ProgramsMixin.enter_syscall (progs.py,
 * the reference) once it has the tracepoint's key and the entry's event: machine.bpf_syscall
 * (entry), which a machine without modeled time, scheduler or deferred work skips (its own
 * test, made here without a Python frame), then fire */
PyObject *enter_syscall(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 4) {
		PyErr_SetString(PyExc_TypeError, "enter_syscall(system, key, ctx, entry)");
		return NULL;
	}
	FirePath *path = fire_path_of(args[0]);
	if (path == NULL)
		return NULL;
	PyObject *scheduler = NULL, *deferred = NULL, *entered = NULL, *result = NULL;
	int skip = 0;
	if (!path->modeled_time) {
		scheduler = own_attr(path->timing, s_scheduler);
		skip = scheduler == NULL ? -1 : scheduler != Py_None ? 0
			: (deferred = own_attr(path->timing, s_ever_deferred)) == NULL ? -1
			: !PyObject_IsTrue(deferred);
	}
	if (!PyErr_Occurred() && !skip)
		entered = PyObject_CallMethodOneArg(path->machine, s_bpf_syscall, args[3]);
	if (!PyErr_Occurred())
		result = fire(args[0], args[1], args[2], path);
	Py_XDECREF(scheduler);
	Py_XDECREF(deferred);
	Py_XDECREF(entered);
	Py_DECREF(path);
	return result;
}

/* EmulatedSystem.enter_syscall(syscall, ctx=b"") in C (the class's method where built: an
 * instancemethod of this function; progs.py's enter_syscall is the reference): the
 * tracepoint's key (syscalls, sys_enter_<syscall>), kept per syscall in the reference's
 * own dict, and the entry's event (syscall_connect for connect), then enter_syscall */
PyObject *enter_syscall_method(PyObject *module, PyObject *const *args, size_t nargsf,
				PyObject *kwnames)
{
	static PyObject *keys;  /* progs._SYSCALL_TRACEPOINTS: syscall -> its tracepoint's key */
	Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
	/* (self, syscall, ctx=b""), the last two by name too */
	PyObject *given[3] = {nargs > 0 ? args[0] : NULL, nargs > 1 ? args[1] : NULL,
			      nargs > 2 ? args[2] : NULL};
	int bad = nargs < 1 || nargs > 3;
	for (Py_ssize_t i = 0; kwnames != NULL && i < PyTuple_GET_SIZE(kwnames) && !bad; i++) {
		PyObject *name = PyTuple_GET_ITEM(kwnames, i);
		int at = PyUnicode_CompareWithASCIIString(name, "syscall") == 0 ? 1
			: PyUnicode_CompareWithASCIIString(name, "ctx") == 0 ? 2 : 0;
		bad = at == 0 || given[at] != NULL;
		if (!bad)
			given[at] = args[nargs + i];
	}
	if (bad || given[1] == NULL) {
		PyErr_SetString(PyExc_TypeError, "enter_syscall(syscall, ctx=b''): one syscall "
				"name and at most one record");
		return NULL;
	}
	if (keys == NULL
	    && (keys = import_name("pybpf.emulated.progs", "_SYSCALL_TRACEPOINTS")) == NULL)
		return NULL;
	if (!PyDict_CheckExact(keys)) {
		PyErr_SetString(PyExc_TypeError, "progs._SYSCALL_TRACEPOINTS is a dict");
		return NULL;
	}
	PyObject *syscall = given[1];
	PyObject *key = PyDict_GetItemWithError(keys, syscall);  /* borrowed */
	if (key == NULL) {
		PyObject *name = PyErr_Occurred() ? NULL
			: PyUnicode_FromFormat("sys_enter_%S", syscall);
		PyObject *made = name == NULL ? NULL : Py_BuildValue("(sO)", "syscalls", name);
		Py_XDECREF(name);
		if (made == NULL || PyDict_SetItem(keys, syscall, made) < 0) {
			Py_XDECREF(made);
			return NULL;
		}
		key = made;
		Py_DECREF(made);  /* the dict holds it */
	}
	int connect = PyUnicode_Check(syscall)
		&& PyUnicode_CompareWithASCIIString(syscall, "connect") == 0;
	PyObject *ctx = given[2] != NULL ? given[2] : s_empty_ctx;
	return enter_syscall(module, (PyObject *[]){given[0], key, ctx,
						  connect ? s_syscall_connect : s_syscall_entry}, 4);
}
