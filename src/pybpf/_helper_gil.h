/* The GIL for the C functions compiled code calls (native.py: a program's entry keeps the GIL
 * for the whole run where its calls take it, else lets it go), included by every module that
 * has such functions */
#ifndef PYBPF_HELPER_GIL_H
#define PYBPF_HELPER_GIL_H

#include <Python.h>
#include <pythread.h>

typedef struct {
	int taken;  /* by helper_gil_take: helper_gil_give lets it go */
	PyGILState_STATE state;
} HelperGil;

/* The GIL, taken where this thread does not hold it already: PyGILState_Ensure and
 * PyGILState_Release make that test themselves with a thread-local read each, and most calls
 * come from a run that holds it */
static inline HelperGil helper_gil_take(void)
{
	/* 3.11: the thread state of the one thread that holds the GIL; later, this thread's where
	 * it holds it; NULL where none does */
#if PY_VERSION_HEX >= 0x030D0000
	PyThreadState *holder = PyThreadState_GetUnchecked();
#else
	PyThreadState *holder = _PyThreadState_UncheckedGet();
#endif
	if (holder != NULL && holder->thread_id == PyThread_get_thread_ident())
		return (HelperGil){0, PyGILState_LOCKED};
	return (HelperGil){1, PyGILState_Ensure()};
}

static inline void helper_gil_give(HelperGil gil)
{
	if (gil.taken)
		PyGILState_Release(gil.state);
}

#endif
