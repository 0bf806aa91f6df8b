/* Attribute reads for the C parts that run at every firing or event (the _cache_model and
 * _shm_maps modules both include it) */
#ifndef PYBPF_PYATTR_H
#define PYBPF_PYATTR_H

#include <Python.h>

/* obj.<name> (a new reference, or NULL with an exception) from the object's own __dict__
 * where it is there, else by getattr: for plain attributes (no descriptor of the name on
 * the class) read on every firing, of classes whose deep MROs make getattr's type lookup
 * the larger part of each read (a system, its machine and timing, an emulated map) */
static inline PyObject *own_attr(PyObject *obj, PyObject *name)
{
	PyObject **dict = _PyObject_GetDictPtr(obj);
	PyObject *value = dict == NULL || *dict == NULL ? NULL
		: PyDict_GetItemWithError(*dict, name);  /* borrowed */
	if (value != NULL)
		return Py_NewRef(value);
	return PyErr_Occurred() ? NULL : PyObject_GetAttr(obj, name);
}

/* obj.<name> where it has one: 1 with *value a new reference, 0 with NULL where it has none
 * (no AttributeError made: its message is most of a missed getattr's cost), -1 with an
 * exception */
#if PY_VERSION_HEX >= 0x030D0000
#define lookup_attr PyObject_GetOptionalAttr
#else
#define lookup_attr _PyObject_LookupAttr
#endif

#endif
