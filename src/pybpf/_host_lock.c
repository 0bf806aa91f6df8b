/*
 * HostLock: a host lock that behaves as threading.Lock does (acquire, release, locked, a
 * context manager) and that the C hot paths take and release by a direct call. The emulated
 * maps' host locks (bucket stripes, the bucket index, element counts, allocator caches, LRU
 * lists) are HostLocks where this extension is built. A map operation takes several, and a
 * threading.Lock taken from C is a method call each time, which cost more than the rest of
 * some operations.
 *
 * On Linux it is a POSIX semaphore of one, as CPython's lock is there, taken without blocking
 * when it is free (sem_trywait: the GIL held, no system call; CPython 3.11's lock reads the
 * clock on every acquire, even one that cannot wait), else waited for with the GIL released
 * and signals handled, and released from any thread. Elsewhere it is a PyThread lock.
 */

#include "_cache_model.h"
#include "pythread.h"

#if defined(__linux__)
#include <errno.h>
#include <semaphore.h>
#define HOST_SEMAPHORE 1
#endif

typedef struct {
	PyObject_HEAD
#ifdef HOST_SEMAPHORE
	sem_t sem;              /* 1: free, 0: held */
	char made;              /* sem_init succeeded */
#else
	PyThread_type_lock lock;
#endif
	char locked;
} HostLock;

static PyObject *s_acquire, *s_release;

/* Taken without waiting: 1, or 0 where it is held */
static int try_take(HostLock *l)
{
#ifdef HOST_SEMAPHORE
	return sem_trywait(&l->sem) == 0;
#else
	return PyThread_acquire_lock(l->lock, NOWAIT_LOCK);
#endif
}

static void give_back(HostLock *l)
{
#ifdef HOST_SEMAPHORE
	sem_post(&l->sem);
#else
	PyThread_release_lock(l->lock);
#endif
}

/* Wait for the lock with the GIL released, as threading.Lock.acquire does: 0, or -1 with an
 * exception (a signal handler raised, or the wait failed) */
static int wait_for(HostLock *l)
{
	for (;;) {
		int got;  /* 1 taken, 0 interrupted, -1 failed (errno) */
		Py_BEGIN_ALLOW_THREADS
#ifdef HOST_SEMAPHORE
		got = sem_wait(&l->sem) == 0 ? 1 : errno == EINTR ? 0 : -1;
#else
		got = PyThread_acquire_lock_timed(l->lock, -1, 1) == PY_LOCK_ACQUIRED;
#endif
		Py_END_ALLOW_THREADS
		if (got > 0)
			return 0;
		if (got < 0) {
			PyErr_SetFromErrno(PyExc_OSError);
			return -1;
		}
		if (Py_MakePendingCalls() < 0)  /* interrupted: run the signal handlers */
			return -1;
	}
}

int host_lock_acquire(PyObject *lock)
{
	if (!Py_IS_TYPE(lock, &HostLockType))
		return call_method(lock, s_acquire);
	HostLock *l = (HostLock *)lock;
	if (!try_take(l) && wait_for(l) < 0)
		return -1;
	l->locked = 1;
	return 0;
}

int host_lock_release(PyObject *lock)
{
	if (!Py_IS_TYPE(lock, &HostLockType))
		return call_method(lock, s_release);
	HostLock *l = (HostLock *)lock;
	if (!l->locked) {
		PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
		return -1;
	}
	l->locked = 0;
	give_back(l);
	return 0;
}

static PyObject *host_lock_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
	if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
		PyErr_SetString(PyExc_TypeError, "HostLock() takes no arguments");
		return NULL;
	}
	HostLock *l = (HostLock *)type->tp_alloc(type, 0);
	if (l == NULL)
		return NULL;
#ifdef HOST_SEMAPHORE
	if (sem_init(&l->sem, 0, 1) < 0) {
		Py_DECREF(l);
		return PyErr_SetFromErrno(PyExc_OSError);
	}
	l->made = 1;
#else
	if ((l->lock = PyThread_allocate_lock()) == NULL) {
		Py_DECREF(l);
		return PyErr_NoMemory();
	}
#endif
	return (PyObject *)l;
}

static void host_lock_dealloc(PyObject *op)
{
	HostLock *l = (HostLock *)op;
#ifdef HOST_SEMAPHORE
	if (l->made)  /* not: sem_init failed */
		sem_destroy(&l->sem);
#else
	if (l->lock != NULL) {  /* NULL: its allocation failed */
		if (l->locked)
			PyThread_release_lock(l->lock);
		PyThread_free_lock(l->lock);
	}
#endif
	Py_TYPE(op)->tp_free(op);
}

/* acquire(blocking=True, timeout=-1) -> bool: a timeout is not taken (no caller waits one) */
static PyObject *host_lock_acquire_method(PyObject *op, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"blocking", "timeout", NULL};
	int blocking = 1;
	double timeout = -1.0;
	HostLock *l = (HostLock *)op;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pd:acquire", kwlist, &blocking, &timeout))
		return NULL;
	if (timeout != -1.0) {
		PyErr_SetString(PyExc_ValueError, "HostLock.acquire takes no timeout: use "
				"threading.Lock where a wait must end");
		return NULL;
	}
	if (!try_take(l)) {
		if (!blocking)
			Py_RETURN_FALSE;
		if (wait_for(l) < 0)
			return NULL;
	}
	l->locked = 1;
	Py_RETURN_TRUE;
}

static PyObject *host_lock_enter(PyObject *op, PyObject *unused)
{
	if (host_lock_acquire(op) < 0)
		return NULL;
	Py_RETURN_TRUE;
}

static PyObject *host_lock_release_method(PyObject *op, PyObject *unused)
{
	if (host_lock_release(op) < 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *host_lock_exit(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
	return host_lock_release_method(op, NULL);
}

static PyObject *host_lock_locked(PyObject *op, PyObject *unused)
{
	return PyBool_FromLong(((HostLock *)op)->locked);
}

static PyMethodDef host_lock_methods[] = {
	{"acquire", (PyCFunction)(void (*)(void))host_lock_acquire_method,
	 METH_VARARGS | METH_KEYWORDS, "acquire(blocking=True) -> bool, as threading.Lock's"},
	{"release", host_lock_release_method, METH_NOARGS, "release(), as threading.Lock's"},
	{"locked", host_lock_locked, METH_NOARGS, "locked() -> bool"},
	{"__enter__", host_lock_enter, METH_NOARGS, "acquire()"},
	{"__exit__", (PyCFunction)(void (*)(void))host_lock_exit, METH_FASTCALL, "release()"},
	{NULL, NULL, 0, NULL},
};

PyTypeObject HostLockType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pybpf._cache_model.HostLock",
	.tp_doc = "HostLock(): a host lock as threading.Lock, which the C hot paths take by a "
		  "direct call",
	.tp_basicsize = sizeof(HostLock),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = host_lock_new,
	.tp_dealloc = host_lock_dealloc,
	.tp_methods = host_lock_methods,
};

int host_lock_ready(void)
{
	if (intern(&s_acquire, "acquire") < 0 || intern(&s_release, "release") < 0)
		return -1;
	return PyType_Ready(&HostLockType);
}
