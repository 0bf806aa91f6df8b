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
 * frames between the syscall and core.run_prog, which stays the one place a program runs.
 */
#include "_cache_model.h"

#define TASK_SIZE_MAX 0x7FFFFFFFF000ULL  /* x86-64, 48-bit virtual addresses */

static PyObject *s_user_memory, *s_starts, *s_blocks, *s_machine, *s_prog, *s_executable,
	*s_charge, *s_tracepoint_entry;
static PyObject *python_helper;  /* bpf_trace.bpf_probe_read_user, imported at first use */

int bpf_trace_ready(void)
{
	return intern(&s_user_memory, "user_memory") < 0 || intern(&s_starts, "_starts") < 0
		|| intern(&s_blocks, "_blocks") < 0 || intern(&s_machine, "machine") < 0
		|| intern(&s_prog, "prog") < 0 || intern(&s_executable, "executable") < 0
		|| intern(&s_charge, "charge") < 0
		|| intern(&s_tracepoint_entry, "tracepoint_entry") < 0 ? -1 : 0;
}

/* The user block holding [addr, addr + size) and the offset there (a new reference), or NULL
 * without an exception where there is none (the Python helper then says what happens) */
static PyObject *user_block(PyObject *machine, uint64_t addr, uint64_t size, Py_ssize_t *off)
{
	PyObject *memory = PyObject_GetAttr(machine, s_user_memory), *starts = NULL;
	PyObject *blocks = NULL, *block = NULL;
	if (memory == NULL || (starts = PyObject_GetAttr(memory, s_starts)) == NULL
	    || (blocks = PyObject_GetAttr(memory, s_blocks)) == NULL)
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
		if (python_helper == NULL) {
			PyObject *trace = PyImport_ImportModule("pybpf.emulated.prog.bpf_trace");
			python_helper = trace == NULL ? NULL
				: PyObject_GetAttrString(trace, "bpf_probe_read_user");
			Py_XDECREF(trace);
		}
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
	PyGILState_STATE gil = PyGILState_Ensure();
	Py_ssize_t off = 0;
	PyObject *block = user_block(machine, src, size, &off);
	uint64_t r0 = PROBE_SLOW;
	if (block != NULL) {
		memcpy(dst, PyBytes_AS_STRING(block) + off, size);
		Py_DECREF(block);
		r0 = 0;
	}
	PyErr_Clear();  /* what failed, the Python helper meets again and reports */
	PyGILState_Release(gil);
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
	PyObject *links = args[0], *record = args[1], *proto = args[2], *ctx_region = args[3];
	PyObject *run_prog = args[4], *timing = args[5], *cpu = args[6];
	Py_ssize_t n = PyTuple_GET_SIZE(links);
	PyObject *retvals = PyList_New(n);
	if (retvals == NULL || bind_run_state_type() < 0)
		goto fail;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *prog = NULL, *exe = NULL, *rs = NULL, *mem = NULL, *r0 = NULL;
		if (cpu != Py_None) {
			PyObject *charged = PyObject_VectorcallMethod(
				s_charge, (PyObject *[]){timing, cpu, s_tracepoint_entry}, 3, NULL);
			if (charged == NULL)
				goto fail;
			Py_DECREF(charged);
		}
		if ((prog = PyObject_GetAttr(PyTuple_GET_ITEM(links, i), s_prog)) != NULL
		    && (exe = PyObject_GetAttr(prog, s_executable)) != NULL
		    && (rs = run_state_copy(proto)) != NULL && (mem = run_regions(rs)) != NULL
		    && PyDict_SetItem(mem, ctx_region, record) == 0)
			r0 = PyObject_Vectorcall(run_prog, (PyObject *[]){exe, rs}, 2, NULL);
		Py_XDECREF(prog);
		Py_XDECREF(exe);
		Py_XDECREF(rs);
		Py_XDECREF(mem);
		if (r0 == NULL)
			goto fail;
		PyList_SET_ITEM(retvals, i, r0);
	}
	return retvals;
fail:
	Py_XDECREF(retvals);
	return NULL;
}
