/* Python ints kept for values a run makes again at every run of a program: its region numbers
 * (each run numbers its regions from the prototype's next one) and their pointers, each a new
 * int where it is made, where a helper looks a map up by it and where it is taken out, and
 * the count and next region a native run hands back. Included by the modules that make them
 * (_accel: place_value; _cache_model: run_state_clean, run_end, pybpf_native_map_core,
 * pybpf_native_lpm_lookup; _shm_maps: pybpf_shm_map_of), each with a table of its own per kind of value (a region
 * number and its pointer take the same slot), used with the GIL held. */
#ifndef PYBPF_INT_CACHE_H
#define PYBPF_INT_CACHE_H

#include <Python.h>
#include <stdint.h>

#define INT_CACHE_SLOTS 64  /* a power of two */

typedef struct {
	uint64_t value;
	PyObject *obj;  /* a reference the table holds, or NULL */
} IntCacheSlot;

/* int(value), a new reference (NULL with an exception): the one ``table`` (INT_CACHE_SLOTS
 * slots) holds where the value's slot (its low bits xor those of its high word, where a
 * pointer's region number is) has it, else one made and kept there */
static inline PyObject *cached_int(IntCacheSlot *table, uint64_t value)
{
	IntCacheSlot *slot = &table[(value ^ (value >> 32)) & (INT_CACHE_SLOTS - 1)];
	if (slot->obj != NULL && slot->value == value)
		return Py_NewRef(slot->obj);
	PyObject *made = PyLong_FromUnsignedLongLong(value);
	if (made == NULL)
		return NULL;
	Py_XSETREF(slot->obj, Py_NewRef(made));
	slot->value = value;
	return made;
}

#endif
