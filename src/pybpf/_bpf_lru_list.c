/*
 * The common BPF LRU's pop and push of a node (kernel/bpf/bpf_lru_list.c:
 * bpf_common_lru_pop_free, bpf_common_lru_push_free) in C, for an LRU_HASH map's HtabCore:
 * BpfLru.pop_free and push_free (pybpf/emulated/maps/bpf_lru_list.py, the reference) done on
 * its own Python lists and nodes, with the same host locks taken and the same charges made in
 * the same order. What a pop does when the CPU's local free list is empty (the refill from
 * the global lists, stealing from other CPUs) is the Python methods', called where the
 * reference calls them; so is a check that fails (the LRU marked broken). A per-CPU LRU
 * (BPF_F_NO_COMMON_LRU) stays Python.
 */
#include "_cache_model.h"

/* enum bpf_lru_list_type; ACTIVE and INACTIVE are counted */
enum { ACTIVE, INACTIVE, FREE, LOCAL_FREE, LOCAL_PENDING, NR_LIST_COUNT = 2 };

static PyObject *s_percpu, *s_local, *s_common, *s_lock, *s_tlock, *s_free, *s_pending,
	*s_heads, *s_counts, *s_next_inactive_rotation, *s_pops, *s_pushes, *s_pop_free_to_local,
	*s_steal, *s_check, *s_push_free, *s_add_pending, *s_move, *s_one;

int lru_ready(void)
{
	return intern(&s_percpu, "percpu") < 0 || intern(&s_local, "local") < 0
		|| intern(&s_common, "common") < 0 || intern(&s_lock, "lock") < 0
		|| intern(&s_tlock, "tlock") < 0 || intern(&s_free, "free") < 0
		|| intern(&s_pending, "pending") < 0 || intern(&s_heads, "heads") < 0
		|| intern(&s_counts, "counts") < 0
		|| intern(&s_next_inactive_rotation, "next_inactive_rotation") < 0
		|| intern(&s_pops, "pops") < 0 || intern(&s_pushes, "pushes") < 0
		|| intern(&s_pop_free_to_local, "_pop_free_to_local") < 0
		|| intern(&s_steal, "_steal") < 0 || intern(&s_check, "_check") < 0
		|| intern(&s_push_free, "push_free") < 0
		|| intern(&s_add_pending, "add_pending") < 0 || intern(&s_move, "move") < 0
		|| (s_one = PyLong_FromLong(1)) == NULL ? -1 : 0;
}

int lru_bind(Lru *l, PyObject *lru)
{
	PyObject *percpu = PyObject_GetAttr(lru, s_percpu);
	int per_cpu = percpu == NULL ? -1 : PyObject_IsTrue(percpu);
	Py_XDECREF(percpu);
	if (per_cpu != 0)
		return per_cpu > 0 ? 0 : -1;
	if ((l->local = PyObject_GetAttr(lru, s_local)) == NULL
	    || (l->common = PyObject_GetAttr(lru, s_common)) == NULL) {
		lru_clear(l);
		return -1;
	}
	if (!PyList_CheckExact(l->local)) {
		PyErr_SetString(PyExc_TypeError, "BpfLru.local is a list, one LocalList per CPU");
		lru_clear(l);
		return -1;
	}
	l->lru = Py_NewRef(lru);
	return 1;
}

int lru_traverse(Lru *l, visitproc visit, void *arg)
{
	Py_VISIT(l->lru);
	Py_VISIT(l->local);
	Py_VISIT(l->common);
	return 0;
}

void lru_clear(Lru *l)
{
	Py_CLEAR(l->lru);
	Py_CLEAR(l->local);
	Py_CLEAR(l->common);
}

/* -- the lists ----------------------------------------------------------------------------- */

/* A node's int field (type, ref, cpu): the value, or -1 with an exception */
static long node_int(PyObject *node, int field)
{
	PyObject *obj = elem_get(node, field);
	long value = obj == NULL ? -1 : PyLong_AsLong(obj);
	Py_XDECREF(obj);
	return value;
}

static int set_int(PyObject *node, int field, long value)
{
	PyObject *obj = PyLong_FromLong(value);
	int rc = obj == NULL ? -1 : elem_set(node, field, obj);
	Py_XDECREF(obj);
	return rc;
}

/* _unlink: list_del, the node's own links left as they were */
static int unlink_node(PyObject *node)
{
	PyObject *prev = elem_get(node, ELEM_PREV), *next = NULL;
	int rc = prev == NULL || (next = elem_get(node, ELEM_NEXT)) == NULL
		|| elem_set(prev, ELEM_NEXT, next) < 0 || elem_set(next, ELEM_PREV, prev) < 0
		? -1 : 0;
	Py_XDECREF(prev);
	Py_XDECREF(next);
	return rc;
}

/* _add_front: list_add, node at the front of head's list */
static int add_front(PyObject *node, PyObject *head)
{
	PyObject *first = elem_get(head, ELEM_NEXT);
	int rc = first == NULL || elem_set(node, ELEM_PREV, head) < 0
		|| elem_set(node, ELEM_NEXT, first) < 0 || elem_set(first, ELEM_PREV, node) < 0
		|| elem_set(head, ELEM_NEXT, node) < 0 ? -1 : 0;
	Py_XDECREF(first);
	return rc;
}

/* _local_pop_free: the front of a local free list, unlinked; NULL without an exception
 * where it is empty */
static PyObject *pop_front(PyObject *head)
{
	PyObject *node = elem_get(head, ELEM_NEXT);
	if (node == NULL || node == head) {
		Py_XDECREF(node);
		return NULL;
	}
	if (unlink_node(node) < 0)
		Py_CLEAR(node);
	return node;
}

/* _check(primitive, node, to_type) where the move is not one of ``legal`` (from types, -1
 * ending): the Python method marks the LRU broken and raises */
static int check(Lru *l, PyObject *primitive, PyObject *node, long from, int to_type,
		 const int *legal)
{
	for (; *legal >= 0; legal++)
		if (from == *legal)
			return 0;
	PyObject *to = PyLong_FromLong(to_type);
	if (to != NULL)
		Py_XDECREF(PyObject_CallMethodObjArgs(l->lru, s_check, primitive, node, to, NULL));
	Py_XDECREF(to);
	if (!PyErr_Occurred())
		PyErr_SetString(PyExc_RuntimeError, "BpfLru._check let an illegal move pass");
	return -1;
}

/* Timing.spin_lock / spin_unlock of an owner's tlock (no model: nothing) */
static int model_lock(PyObject *model, PyObject *cpu_obj, PyObject *tlock, int take)
{
	if (model == NULL)
		return 0;
	PyObject *args[2] = {cpu_obj, tlock};
	PyObject *done = take ? cm_spin_lock(model, args, 2) : cm_spin_unlock(model, args, 2);
	Py_XDECREF(done);
	return done == NULL ? -1 : 0;
}

/* The owner (a LocalList or the LruList) and its host lock and modeled lock */
static int owner_locks(PyObject *owner, PyObject **lock, PyObject **tlock)
{
	*tlock = NULL;
	return (*lock = PyObject_GetAttr(owner, s_lock)) == NULL
		|| (*tlock = PyObject_GetAttr(owner, s_tlock)) == NULL ? -1 : 0;
}

static PyObject *local_list(Lru *l, long cpu)
{
	if (cpu < 0 || cpu >= PyList_GET_SIZE(l->local)) {
		PyErr_Format(PyExc_IndexError, "CPU %ld has no local LRU lists", cpu);
		return NULL;
	}
	return Py_NewRef(PyList_GET_ITEM(l->local, cpu));
}

/* -- pop ----------------------------------------------------------------------------------- */

/* _add_pending: node onto the CPU's pending list, owned by it */
static int add_pending(Lru *l, PyObject *model, PyObject *pending, PyObject *node,
		       PyObject *cpu_obj, int cpu)
{
	static const int legal[] = {LOCAL_FREE, LOCAL_PENDING, -1};
	long from = node_int(node, ELEM_TYPE);
	if ((from == -1 && PyErr_Occurred())
	    || check(l, s_add_pending, node, from, LOCAL_PENDING, legal) < 0)
		return -1;
	return elem_set(node, ELEM_CPU, cpu_obj) < 0 || set_int(node, ELEM_TYPE, LOCAL_PENDING) < 0
		|| set_int(node, ELEM_REF, 0) < 0 || add_front(node, pending) < 0
		|| write_line(model, node, cpu) < 0 ? -1 : 0;
}

PyObject *lru_pop_free(Lru *l, PyObject *model, PyObject *cpu_obj, int cpu)
{
	PyObject *loc = local_list(l, cpu), *lock = NULL, *tlock = NULL, *free = NULL;
	PyObject *pending = NULL, *node = NULL, *result = NULL;
	if (loc == NULL || owner_locks(loc, &lock, &tlock) < 0
	    || (free = PyObject_GetAttr(loc, s_free)) == NULL
	    || (pending = PyObject_GetAttr(loc, s_pending)) == NULL
	    || host_lock_acquire(lock) < 0)
		goto out;
	/* with loc.lock: the modeled lock, then the node, the modeled unlock in any case */
	int rc = model_lock(model, cpu_obj, tlock, 1);
	if (rc == 0) {
		if ((node = pop_front(free)) == NULL && !PyErr_Occurred()) {
			PyObject *refilled = PyObject_CallMethodOneArg(l->lru, s_pop_free_to_local, loc);
			Py_XDECREF(refilled);
			if (refilled != NULL)
				node = pop_front(free);
		}
		if (PyErr_Occurred() || (node != NULL && add_pending(l, model, pending, node,
								     cpu_obj, cpu) < 0))
			rc = -1;
		rc = model_unlock(model, cpu_obj, tlock, rc);
	}
	if (lock_release(lock, rc) < 0)
		goto out;
	if (node == NULL) {  /* none here: from another CPU's lists */
		PyObject *args[3] = {l->lru, loc, cpu_obj};
		if ((node = PyObject_VectorcallMethod(s_steal, args, 3, NULL)) == NULL)
			goto out;
	}
	if (node != Py_None && attr_increment(l->lru, s_pops) < 0)
		goto out;
	result = Py_NewRef(node);
out:
	Py_XDECREF(loc);
	Py_XDECREF(lock);
	Py_XDECREF(tlock);
	Py_XDECREF(free);
	Py_XDECREF(pending);
	Py_XDECREF(node);
	return result;
}

/* -- push ---------------------------------------------------------------------------------- */

/* A pending node back to its CPU's local free list, if it is still pending under that list's
 * lock: 1 (done), 0 (it is not: the global lists take it), -1 */
static int pending_to_free(PyObject *loc, PyObject *model, PyObject *node, PyObject *cpu_obj,
			   int cpu)
{
	PyObject *lock = NULL, *tlock = NULL, *free = NULL;
	int rc = -1;
	if (owner_locks(loc, &lock, &tlock) < 0 || (free = PyObject_GetAttr(loc, s_free)) == NULL
	    || host_lock_acquire(lock) < 0)
		goto out;
	long type = node_int(node, ELEM_TYPE);
	rc = type == -1 && PyErr_Occurred() ? -1 : type != LOCAL_PENDING ? 0
		/* _check("pending_to_free") holds: the node is pending */
		: model_lock(model, cpu_obj, tlock, 1) < 0 || set_int(node, ELEM_TYPE, LOCAL_FREE) < 0
		|| set_int(node, ELEM_REF, 0) < 0 || unlink_node(node) < 0
		|| add_front(node, free) < 0 || write_line(model, node, cpu) < 0
		|| model_lock(model, cpu_obj, tlock, 0) < 0 ? -1 : 1;
	rc = lock_release(lock, rc);
out:
	Py_XDECREF(lock);
	Py_XDECREF(tlock);
	Py_XDECREF(free);
	return rc;
}

/* _move(lst, node, FREE): __bpf_lru_node_move to the front of the global FREE list */
static int move_to_free(Lru *l, PyObject *model, PyObject *lst, PyObject *node, long from,
			int cpu)
{
	static const int legal[] = {ACTIVE, INACTIVE, FREE, -1};
	PyObject *heads = NULL, *counts = NULL, *rotation = NULL, *prev = NULL;
	int rc = -1;
	if (check(l, s_move, node, from, FREE, legal) < 0
	    || (heads = PyObject_GetAttr(lst, s_heads)) == NULL
	    || (counts = PyObject_GetAttr(lst, s_counts)) == NULL)
		goto out;
	if (!PyList_Check(heads) || PyList_GET_SIZE(heads) <= FREE || !PyList_Check(counts)
	    || PyList_GET_SIZE(counts) < NR_LIST_COUNT) {
		PyErr_SetString(PyExc_TypeError, "an LruList has three heads and two counts");
		goto out;
	}
	if (from != FREE) {
		if (from < NR_LIST_COUNT) {
			PyObject *n = PyNumber_Subtract(PyList_GET_ITEM(counts, from), s_one);
			if (n == NULL || PyList_SetItem(counts, from, n) < 0)
				goto out;
		}
		if (set_int(node, ELEM_TYPE, FREE) < 0)
			goto out;
	}
	if (set_int(node, ELEM_REF, 0) < 0
	    || (rotation = PyObject_GetAttr(lst, s_next_inactive_rotation)) == NULL)
		goto out;
	if (rotation == node && ((prev = elem_get(node, ELEM_PREV)) == NULL
				 || PyObject_SetAttr(lst, s_next_inactive_rotation, prev) < 0))
		goto out;
	rc = unlink_node(node) < 0 || add_front(node, PyList_GET_ITEM(heads, FREE)) < 0
		|| write_line(model, node, cpu) < 0 ? -1 : 0;
out:
	Py_XDECREF(heads);
	Py_XDECREF(counts);
	Py_XDECREF(rotation);
	Py_XDECREF(prev);
	return rc;
}

int lru_push_free(Lru *l, PyObject *model, PyObject *node, PyObject *cpu_obj, int cpu)
{
	long type = node_int(node, ELEM_TYPE);
	if (type == -1 && PyErr_Occurred())
		return -1;
	if (type == FREE || type == LOCAL_FREE) {  /* pushed twice: the reference refuses it */
		PyObject *done = PyObject_CallMethodOneArg(l->lru, s_push_free, node);
		Py_XDECREF(done);
		if (done != NULL)
			PyErr_SetString(PyExc_RuntimeError, "BpfLru.push_free took a free node");
		return -1;
	}
	if (attr_increment(l->lru, s_pushes) < 0)
		return -1;
	if (type == LOCAL_PENDING) {
		long owner = node_int(node, ELEM_CPU);
		PyObject *loc = owner == -1 && PyErr_Occurred() ? NULL : local_list(l, owner);
		int done = loc == NULL ? -1 : pending_to_free(loc, model, node, cpu_obj, cpu);
		Py_XDECREF(loc);
		if (done != 0)
			return done < 0 ? -1 : 0;
	}
	/* with common.lock: the modeled lock, the move, the modeled unlock */
	PyObject *lock = NULL, *tlock = NULL;
	int rc = -1;
	if (owner_locks(l->common, &lock, &tlock) < 0 || host_lock_acquire(lock) < 0)
		goto out;
	long from = node_int(node, ELEM_TYPE);
	rc = (from == -1 && PyErr_Occurred()) || model_lock(model, cpu_obj, tlock, 1) < 0
		|| move_to_free(l, model, l->common, node, from, cpu) < 0
		|| model_lock(model, cpu_obj, tlock, 0) < 0 ? -1 : 0;
	rc = lock_release(lock, rc);
out:
	Py_XDECREF(lock);
	Py_XDECREF(tlock);
	return rc;
}
