/*
 * The common BPF LRU's pop and push of a node (kernel/bpf/bpf_lru_list.c:
 * bpf_common_lru_pop_free, bpf_common_lru_push_free) in C, for an LRU_HASH map's HtabCore:
 * BpfLru.pop_free and push_free (pybpf/emulated/maps/bpf_lru_list.py, the reference) done on
 * its own Python lists and nodes, with the same host locks taken and the same charges made in
 * the same order; so is the refill of a CPU's empty local free list from the global lists
 * (bpf_lru_list_pop_free_to_local: flush the pending nodes, rotate, take free nodes, shrink
 * for the rest, evicting through the map's callback). Stealing from other CPUs, making the
 * lazily populated nodes and a check that fails (the LRU marked broken) are the Python
 * methods', called where the reference calls them. A per-CPU LRU (BPF_F_NO_COMMON_LRU) stays
 * Python.
 */
#include "_cache_model.h"

/* enum bpf_lru_list_type; ACTIVE and INACTIVE are counted */
enum { ACTIVE, INACTIVE, FREE, LOCAL_FREE, LOCAL_PENDING, NR_LIST_COUNT = 2 };

static PyObject *s_percpu, *s_local, *s_common, *s_steal, *s_check, *s_push_free,
	*s_add_pending, *s_move, *s_move_in, *s_move_to_free, *s_del_from_htab, *s_make_free,
	*s_lru_evict, *s_nr_scans, *s_target_free, *s_one;

int lru_ready(void)
{
	return intern(&s_percpu, "percpu") < 0 || intern(&s_local, "local") < 0
		|| intern(&s_common, "common") < 0
		|| intern(&s_steal, "_steal") < 0 || intern(&s_check, "_check") < 0
		|| intern(&s_push_free, "push_free") < 0
		|| intern(&s_add_pending, "add_pending") < 0 || intern(&s_move, "move") < 0
		|| intern(&s_move_in, "move_in") < 0 || intern(&s_move_to_free, "move_to_free") < 0
		|| intern(&s_del_from_htab, "del_from_htab") < 0
		|| intern(&s_make_free, "_make_free") < 0 || intern(&s_lru_evict, "bpf_lru_evict") < 0
		|| intern(&s_nr_scans, "nr_scans") < 0 || intern(&s_target_free, "target_free") < 0
		|| (s_one = PyLong_FromLong(1)) == NULL ? -1 : 0;
}

/* The fields the pops and pushes read and write on every call, at their slots (the classes'
 * __slots__), bound by the first LRU map's core */
enum { LOCAL_FREE_F, LOCAL_PENDING_F, LOCAL_LOCK_F, LOCAL_TLOCK_F,
       LIST_HEADS_F, LIST_COUNTS_F, LIST_ROTATION_F, LIST_LOCK_F, LIST_TLOCK_F, LRU_FIELDS };
static SlotField fields[LRU_FIELDS];

static int bind_fields(void)
{
	static const SlotFieldOf of[LRU_FIELDS] = {
		[LOCAL_FREE_F] = {"LocalList", "free"}, [LOCAL_PENDING_F] = {"LocalList", "pending"},
		[LOCAL_LOCK_F] = {"LocalList", "lock"}, [LOCAL_TLOCK_F] = {"LocalList", "tlock"},
		[LIST_HEADS_F] = {"LruList", "heads"}, [LIST_COUNTS_F] = {"LruList", "counts"},
		[LIST_ROTATION_F] = {"LruList", "next_inactive_rotation"},
		[LIST_LOCK_F] = {"LruList", "lock"}, [LIST_TLOCK_F] = {"LruList", "tlock"},
	};
	return slot_fields_bind(fields, of, LRU_FIELDS, "pybpf.emulated.maps.bpf_lru_list");
}

/* The BpfLru's counters the pops and pushes count, in Lru.count_at's order */
enum { LRU_POPS, LRU_PUSHES, LRU_EVICTIONS, LRU_REFILLS };
static const char *const COUNTED[] = {"pops", "pushes", "evictions", "refills"};

int lru_bind(Lru *l, PyObject *lru)
{
	if (bind_fields() < 0)
		return -1;
	PyObject *percpu = PyObject_GetAttr(lru, s_percpu);
	int per_cpu = percpu == NULL ? -1 : PyObject_IsTrue(percpu);
	Py_XDECREF(percpu);
	if (per_cpu != 0)
		return per_cpu > 0 ? 0 : -1;
	if ((l->local = PyObject_GetAttr(lru, s_local)) == NULL
	    || (l->common = PyObject_GetAttr(lru, s_common)) == NULL
	    || counts_bind(&l->counts, lru, COUNTED, l->count_at, 4) < 0) {
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
	counts_release(&l->counts);
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

/* The host lock and modeled lock of a LocalList (``lock_field`` LOCAL_LOCK_F) or the LruList
 * (LIST_LOCK_F; the modeled lock's field follows the host lock's) */
static int owner_locks(PyObject *owner, int lock_field, PyObject **lock, PyObject **tlock)
{
	*tlock = NULL;
	return (*lock = slot_field_get(&fields[lock_field], owner)) == NULL
		|| (*tlock = slot_field_get(&fields[lock_field + 1], owner)) == NULL ? -1 : 0;
}

static PyObject *local_list(Lru *l, long cpu)
{
	if (cpu < 0 || cpu >= PyList_GET_SIZE(l->local)) {
		PyErr_Format(PyExc_IndexError, "CPU %ld has no local LRU lists", cpu);
		return NULL;
	}
	return Py_NewRef(PyList_GET_ITEM(l->local, cpu));
}

/* -- the global lists' moves ---------------------------------------------------------------- */

/* The LruList's heads and counts (new references), read once per refill or push */
typedef struct {
	PyObject *lst, *heads, *counts;
} Lists;

static int lists_get(PyObject *lst, Lists *g)
{
	g->lst = lst;
	g->counts = NULL;
	if ((g->heads = slot_field_get(&fields[LIST_HEADS_F], lst)) == NULL
	    || (g->counts = slot_field_get(&fields[LIST_COUNTS_F], lst)) == NULL)
		return -1;
	if (!PyList_Check(g->heads) || PyList_GET_SIZE(g->heads) <= FREE
	    || !PyList_Check(g->counts) || PyList_GET_SIZE(g->counts) < NR_LIST_COUNT) {
		PyErr_SetString(PyExc_TypeError, "an LruList has three heads and two counts");
		return -1;
	}
	return 0;
}

static void lists_put(Lists *g)
{
	Py_CLEAR(g->heads);
	Py_CLEAR(g->counts);
}

/* lst.counts[type] += delta */
static int count_add(Lists *g, long type, long delta)
{
	PyObject *by = PyLong_FromLong(delta), *sum = NULL;
	if (by != NULL)
		sum = PyNumber_Add(PyList_GET_ITEM(g->counts, type), by);
	Py_XDECREF(by);
	return sum == NULL ? -1 : PyList_SetItem(g->counts, type, sum);
}

/* bool(node.field): 1, 0, or -1 with an exception */
static int node_true(PyObject *node, int field)
{
	PyObject *obj = elem_get(node, field);
	int rc = obj == NULL ? -1 : PyObject_IsTrue(obj);
	Py_XDECREF(obj);
	return rc;
}

/* A node leaving its list moves the inactive rotation's cursor off it, to its prev */
static int leave_rotation(Lists *g, PyObject *node)
{
	PyObject *rotation = slot_field_get(&fields[LIST_ROTATION_F], g->lst), *prev = NULL;
	int rc = rotation == NULL ? -1 : rotation != node ? 0
		: (prev = elem_get(node, ELEM_PREV)) == NULL
		|| slot_field_set(&fields[LIST_ROTATION_F], g->lst, prev) < 0 ? -1 : 0;
	Py_XDECREF(rotation);
	Py_XDECREF(prev);
	return rc;
}

static const int LRU_TYPES[] = {ACTIVE, INACTIVE, FREE, -1};
static const int PENDING[] = {LOCAL_PENDING, -1};

/* _move: __bpf_lru_node_move to the front of ACTIVE, INACTIVE or FREE, its ref cleared */
static int move_node(Lru *l, PyObject *model, Lists *g, PyObject *node, int to, int cpu)
{
	long from = node_int(node, ELEM_TYPE);
	if ((from == -1 && PyErr_Occurred()) || check(l, s_move, node, from, to, LRU_TYPES) < 0)
		return -1;
	if (from != to && ((from < NR_LIST_COUNT && count_add(g, from, -1) < 0)
			   || (to < NR_LIST_COUNT && count_add(g, to, 1) < 0)
			   || set_int(node, ELEM_TYPE, to) < 0))
		return -1;
	return set_int(node, ELEM_REF, 0) < 0 || leave_rotation(g, node) < 0
		|| unlink_node(node) < 0 || add_front(node, PyList_GET_ITEM(g->heads, to)) < 0
		|| write_line(model, node, cpu) < 0 ? -1 : 0;
}

/* _move_in: __bpf_lru_node_move_in, a flushed pending node into ACTIVE or INACTIVE */
static int move_in(Lru *l, PyObject *model, Lists *g, PyObject *node, int to, int cpu)
{
	long from = node_int(node, ELEM_TYPE);
	return (from == -1 && PyErr_Occurred()) || check(l, s_move_in, node, from, to, PENDING) < 0
		|| count_add(g, to, 1) < 0 || set_int(node, ELEM_TYPE, to) < 0
		|| set_int(node, ELEM_REF, 0) < 0 || unlink_node(node) < 0
		|| add_front(node, PyList_GET_ITEM(g->heads, to)) < 0
		|| write_line(model, node, cpu) < 0 ? -1 : 0;
}

/* _move_to_free: __bpf_lru_node_move_to_free onto ``free`` as ``free_type`` (the ref bit
 * kept, as the kernel keeps it) */
static int move_to_free(Lru *l, PyObject *model, Lists *g, PyObject *node, PyObject *free,
			int free_type, int cpu)
{
	long from = node_int(node, ELEM_TYPE);
	return (from == -1 && PyErr_Occurred())
		|| check(l, s_move_to_free, node, from, free_type, LRU_TYPES) < 0
		|| leave_rotation(g, node) < 0
		|| (from < NR_LIST_COUNT && count_add(g, from, -1) < 0)
		|| set_int(node, ELEM_TYPE, free_type) < 0 || unlink_node(node) < 0
		|| add_front(node, free) < 0 || write_line(model, node, cpu) < 0 ? -1 : 0;
}

/* -- the refill of a CPU's local free list --------------------------------------------------- */

/* What a refill reads of the BpfLru once: its scan and refill sizes, its eviction callback */
typedef struct {
	Lru *l;
	PyObject *model, *cpu_obj;
	int cpu;
	long nr_scans, target_free;
	PyObject *del_from_htab;
} Refill;

/* _rotate_active: ACTIVE scanned from its back, up to nr_scans nodes or its first: a
 * referenced node stays ACTIVE (to the front), the others go INACTIVE */
static int rotate_active(Refill *r, Lists *g)
{
	PyObject *head = PyList_GET_ITEM(g->heads, ACTIVE);
	PyObject *first = elem_get(head, ELEM_NEXT), *node = NULL;
	int rc = first == NULL || (node = elem_get(head, ELEM_PREV)) == NULL ? -1 : 0;
	for (long i = 0; rc == 0 && node != head;) {
		PyObject *prev = elem_get(node, ELEM_PREV);
		int ref = prev == NULL ? -1 : node_true(node, ELEM_REF);
		rc = ref < 0 || move_node(r->l, r->model, g, node, ref ? ACTIVE : INACTIVE, r->cpu) < 0
			? -1 : 0;
		int last = ++i == r->nr_scans || node == first;
		Py_XSETREF(node, prev);
		if (last)
			break;
	}
	Py_XDECREF(first);
	Py_XDECREF(node);
	return rc;
}

/* _rotate_inactive: INACTIVE scanned from the cursor backwards, up to nr_scans nodes (the
 * head skipped): a referenced node goes ACTIVE; the cursor ends where the scan stopped */
static int rotate_inactive(Refill *r, Lists *g)
{
	PyObject *inactive = PyList_GET_ITEM(g->heads, INACTIVE);
	PyObject *first = elem_get(inactive, ELEM_NEXT), *cur = NULL, *last = NULL, *next = NULL;
	int rc = -1;
	if (first == NULL)
		goto out;
	if (first == inactive) {
		rc = 0;
		goto out;
	}
	if ((cur = slot_field_get(&fields[LIST_ROTATION_F], g->lst)) == NULL
	    || (last = elem_get(cur, ELEM_NEXT)) == NULL)
		goto out;
	if (last == inactive) {
		Py_SETREF(last, elem_get(inactive, ELEM_NEXT));
		if (last == NULL)
			goto out;
	}
	next = Py_NewRef(inactive);
	rc = 0;
	for (long i = 0; rc == 0 && i < r->nr_scans;) {
		if (cur == inactive) {
			Py_SETREF(cur, elem_get(cur, ELEM_PREV));
			rc = cur == NULL ? -1 : 0;
			continue;
		}
		Py_SETREF(next, elem_get(cur, ELEM_PREV));
		int ref = next == NULL ? -1 : node_true(cur, ELEM_REF);
		if (ref < 0 || (ref && move_node(r->l, r->model, g, cur, ACTIVE, r->cpu) < 0)) {
			rc = -1;
			break;
		}
		if (cur == last)
			break;
		Py_SETREF(cur, Py_NewRef(next));
		i++;
	}
	if (rc == 0)
		rc = slot_field_set(&fields[LIST_ROTATION_F], g->lst, next);
out:
	Py_XDECREF(first);
	Py_XDECREF(cur);
	Py_XDECREF(last);
	Py_XDECREF(next);
	return rc;
}

/* _rotate: ACTIVE first where it outnumbers INACTIVE, then INACTIVE */
static int rotate(Refill *r, Lists *g)
{
	int fewer = PyObject_RichCompareBool(PyList_GET_ITEM(g->counts, INACTIVE),
					     PyList_GET_ITEM(g->counts, ACTIVE), Py_LT);
	return fewer < 0 || (fewer && rotate_active(r, g) < 0) || rotate_inactive(r, g) < 0
		? -1 : 0;
}

/* The map's eviction callback on node (its key unhashed): 1, 0, or -1 */
static int evict(Refill *r, PyObject *node)
{
	PyObject *done = htab_evict_node(r->del_from_htab, node, r->cpu_obj, r->cpu);
	int rc = done == NULL ? -1 : PyObject_IsTrue(done);
	Py_XDECREF(done);
	return rc;
}

/* node, evicted, onto ``free``; _evicted: counted and charged */
static int take_evicted(Refill *r, Lists *g, PyObject *node, PyObject *free, int free_type)
{
	if (move_to_free(r->l, r->model, g, node, free, free_type, r->cpu) < 0)
		return -1;
	counts_add(&r->l->counts, r->l->count_at[LRU_EVICTIONS], 1);
	return charge_n(r->model, r->cpu_obj, s_lru_evict, s_one);
}

/* _shrink_inactive: up to ``want`` nodes from INACTIVE's back evicted onto ``free`` within
 * nr_scans nodes (a referenced one goes ACTIVE): how many, or -1 */
static long shrink_inactive(Refill *r, Lists *g, long want, PyObject *free, int free_type)
{
	PyObject *head = PyList_GET_ITEM(g->heads, INACTIVE), *node = elem_get(head, ELEM_PREV);
	long done = node == NULL ? -1 : 0;
	for (long i = 0; done >= 0 && node != head;) {
		PyObject *prev = elem_get(node, ELEM_PREV);
		int ref = prev == NULL ? -1 : node_true(node, ELEM_REF), gone = 0;
		if (ref < 0 || (ref ? move_node(r->l, r->model, g, node, ACTIVE, r->cpu)
				: (gone = evict(r, node))) < 0
		    || (gone && take_evicted(r, g, node, free, free_type) < 0)) {
			Py_XDECREF(prev);
			done = -1;
			break;
		}
		Py_SETREF(node, prev);
		if ((gone && ++done == want) || ++i == r->nr_scans)
			break;
	}
	Py_XDECREF(node);
	return done;
}

/* _shrink: shrink_inactive, else the first node from the back of INACTIVE (or of ACTIVE
 * where INACTIVE is empty) that can be evicted: how many, or -1 */
static long shrink(Refill *r, Lists *g, long want, PyObject *free, int free_type)
{
	long done = shrink_inactive(r, g, want, free, free_type);
	if (done != 0)
		return done;
	PyObject *inactive = PyList_GET_ITEM(g->heads, INACTIVE);
	PyObject *first = elem_get(inactive, ELEM_NEXT);
	if (first == NULL)
		return -1;
	PyObject *victims = first != inactive ? inactive : PyList_GET_ITEM(g->heads, ACTIVE);
	Py_DECREF(first);
	PyObject *node = elem_get(victims, ELEM_PREV);
	done = node == NULL ? -1 : 0;
	while (done == 0 && node != victims) {
		PyObject *prev = elem_get(node, ELEM_PREV);
		int gone = prev == NULL ? -1 : evict(r, node);
		if (gone < 0 || (gone && take_evicted(r, g, node, free, free_type) < 0))
			done = -1;
		else if (gone)
			done = 1;
		Py_SETREF(node, prev);
	}
	Py_XDECREF(node);
	return done;
}

/* The refill's work under the global lists' locks */
static int refill_locked(Refill *r, Lists *g, PyObject *loc)
{
	PyObject *pending = NULL, *free = NULL, *node = NULL, *made = NULL, *target = NULL;
	int rc = -1;
	counts_add(&r->l->counts, r->l->count_at[LRU_REFILLS], 1);
	if ((pending = slot_field_get(&fields[LOCAL_PENDING_F], loc)) == NULL
	    || (free = slot_field_get(&fields[LOCAL_FREE_F], loc)) == NULL
	    || (node = elem_get(pending, ELEM_PREV)) == NULL)
		goto out;
	while (node != pending) {  /* _flush_pending: the pending nodes from the back */
		PyObject *prev = elem_get(node, ELEM_PREV);
		int ref = prev == NULL ? -1 : node_true(node, ELEM_REF);
		if (ref < 0 || move_in(r->l, r->model, g, node, ref ? ACTIVE : INACTIVE, r->cpu) < 0) {
			Py_XDECREF(prev);
			goto out;
		}
		Py_SETREF(node, prev);
	}
	if (rotate(r, g) < 0 || (target = PyLong_FromLong(r->target_free)) == NULL
	    || (made = PyObject_CallMethodObjArgs(r->l->lru, s_make_free, g->lst, target,
						  NULL)) == NULL)
		goto out;
	PyObject *global = PyList_GET_ITEM(g->heads, FREE);
	Py_SETREF(node, elem_get(global, ELEM_NEXT));
	long taken = 0;
	while (node != NULL && node != global && taken < r->target_free) {
		PyObject *next = elem_get(node, ELEM_NEXT);
		if (next == NULL || move_to_free(r->l, r->model, g, node, free, LOCAL_FREE, r->cpu) < 0) {
			Py_XDECREF(next);
			goto out;
		}
		Py_SETREF(node, next);
		taken++;
	}
	if (node == NULL)
		goto out;
	rc = taken < r->target_free
		&& shrink(r, g, r->target_free - taken, free, LOCAL_FREE) < 0 ? -1 : 0;
out:
	Py_XDECREF(pending);
	Py_XDECREF(free);
	Py_XDECREF(node);
	Py_XDECREF(made);
	Py_XDECREF(target);
	return rc;
}

/* BpfLru._pop_free_to_local(loc): bpf_lru_list_pop_free_to_local, under the global lists'
 * host lock and modeled lock */
static int pop_free_to_local(Lru *l, PyObject *model, PyObject *loc, PyObject *cpu_obj, int cpu)
{
	Refill r = {.l = l, .model = model, .cpu_obj = cpu_obj, .cpu = cpu};
	Lists g = {0};
	PyObject *lock = NULL, *tlock = NULL, *scans = NULL, *target = NULL;
	int rc = -1;
	if ((scans = PyObject_GetAttr(l->lru, s_nr_scans)) == NULL
	    || (target = PyObject_GetAttr(l->lru, s_target_free)) == NULL
	    || ((r.nr_scans = PyLong_AsLong(scans)) == -1 && PyErr_Occurred())
	    || ((r.target_free = PyLong_AsLong(target)) == -1 && PyErr_Occurred())
	    || (r.del_from_htab = PyObject_GetAttr(l->lru, s_del_from_htab)) == NULL
	    || lists_get(l->common, &g) < 0
	    || owner_locks(l->common, LIST_LOCK_F, &lock, &tlock) < 0
	    || host_lock_acquire(lock) < 0)
		goto out;
	rc = model_lock(model, cpu_obj, tlock, 1);
	if (rc == 0)
		rc = model_unlock(model, cpu_obj, tlock, refill_locked(&r, &g, loc));
	rc = lock_release(lock, rc);
out:
	lists_put(&g);
	Py_XDECREF(lock);
	Py_XDECREF(tlock);
	Py_XDECREF(scans);
	Py_XDECREF(target);
	Py_XDECREF(r.del_from_htab);
	return rc;
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
	if (loc == NULL || owner_locks(loc, LOCAL_LOCK_F, &lock, &tlock) < 0
	    || (free = slot_field_get(&fields[LOCAL_FREE_F], loc)) == NULL
	    || (pending = slot_field_get(&fields[LOCAL_PENDING_F], loc)) == NULL
	    || host_lock_acquire(lock) < 0)
		goto out;
	/* with loc.lock: the modeled lock, then the node, the modeled unlock in any case */
	int rc = model_lock(model, cpu_obj, tlock, 1);
	if (rc == 0) {
		if ((node = pop_front(free)) == NULL && !PyErr_Occurred()
		    && pop_free_to_local(l, model, loc, cpu_obj, cpu) == 0)
			node = pop_front(free);
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
	if (node != Py_None)
		counts_add(&l->counts, l->count_at[LRU_POPS], 1);
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
	if (owner_locks(loc, LOCAL_LOCK_F, &lock, &tlock) < 0
	    || (free = slot_field_get(&fields[LOCAL_FREE_F], loc)) == NULL
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
	counts_add(&l->counts, l->count_at[LRU_PUSHES], 1);
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
	if (owner_locks(l->common, LIST_LOCK_F, &lock, &tlock) < 0 || host_lock_acquire(lock) < 0)
		goto out;
	Lists g = {0};
	rc = lists_get(l->common, &g) < 0 || model_lock(model, cpu_obj, tlock, 1) < 0
		|| move_node(l, model, &g, node, FREE, cpu) < 0
		|| model_lock(model, cpu_obj, tlock, 0) < 0 ? -1 : 0;
	lists_put(&g);
	rc = lock_release(lock, rc);
out:
	Py_XDECREF(lock);
	Py_XDECREF(tlock);
	return rc;
}
