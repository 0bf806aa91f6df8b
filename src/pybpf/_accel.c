/*
 * pybpf._accel: the optional C accelerator of the Map layer.
 *
 * Rules it keeps:
 * - It is optional: pybpf works without it (src/pybpf/mapcore.py has a pure-Python twin of
 *   MapCore), and PYBPF_NO_ACCEL=1 turns it off. Both paths give the same bytes and errno.
 * - MapCore is the base class of pybpf.maps.Map: m[k], m[k] = v, del m[k] and k in m run
 *   here without a Python frame, on what the System's FastOps capability offers: mode
 *   KERNEL calls bpf(2) directly on its bpf_fd; mode TABLE reads its live table; mode SLOW
 *   calls its callables. Errors are built by the Map's own _error(errno, command[, count])
 *   (the capability's error), so they are exactly the exceptions of the pure-Python path.
 * - Codecs of kind BYTES and (U)INT up to 8 bytes run natively; any other codec, or a value
 *   the native path cannot take, goes through the Python codec (which also writes the
 *   error messages).
 * - The module functions are thin bpf(2) wrappers for the benchmarks and for batches into
 *   preallocated buffers (the kernel backend's FastOps offers them); batch calls release
 *   the GIL.
 * - atomic_rmw is the emulated engines' BPF atomic on plain memory: a hardware atomic, so the
 *   Python engines and compiled (native-tier) programs, which run without the GIL, never
 *   lose one another's updates.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "_helper_gil.h"
#include "_int_cache.h"

#if LONG_MAX < INT64_MAX
#error "pybpf._accel assumes a 64-bit long (LP64)"
#endif

#ifndef __NR_bpf
#if defined(__x86_64__)
#define __NR_bpf 321
#elif defined(__aarch64__)
#define __NR_bpf 280
#elif defined(__i386__)
#define __NR_bpf 357
#else
#error "unknown bpf(2) syscall number for this architecture"
#endif
#endif

enum {
	CMD_MAP_LOOKUP_ELEM = 1,
	CMD_MAP_UPDATE_ELEM = 2,
	CMD_MAP_DELETE_ELEM = 3,
	CMD_MAP_LOOKUP_BATCH = 24,
	CMD_MAP_LOOKUP_AND_DELETE_BATCH = 25,
	CMD_MAP_UPDATE_BATCH = 26,
	CMD_MAP_DELETE_BATCH = 27,
};

/* Codec kinds: pybpf.codecs.KIND_*. */
enum { KIND_GENERIC = 0, KIND_BYTES = 1, KIND_UINT = 2, KIND_INT = 3 };
/* Core modes: pybpf.mapcore.MODE_*. */
enum { MODE_SLOW = 0, MODE_KERNEL = 1, MODE_TABLE = 2 };

/* union bpf_attr for the *_ELEM commands and for the batch commands. */
struct elem_attr {
	uint32_t map_fd;
	uint32_t pad;
	uint64_t key;
	uint64_t value;
	uint64_t flags;
};

struct batch_attr {
	uint64_t in_batch;
	uint64_t out_batch;
	uint64_t keys;
	uint64_t values;
	uint32_t count;
	uint32_t map_fd;
	uint64_t elem_flags;
	uint64_t flags;
};

/* 0 or the errno of the failed call. */
static inline int sys_bpf(int cmd, void *attr, unsigned int size)
{
	return syscall(__NR_bpf, cmd, attr, size) < 0 ? errno : 0;
}

static int elem_op(int cmd, int fd, const void *key, void *value, uint64_t flags)
{
	struct elem_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.map_fd = (uint32_t)fd;
	attr.key = (uint64_t)(uintptr_t)key;
	attr.value = (uint64_t)(uintptr_t)value;
	attr.flags = flags;
	return sys_bpf(cmd, &attr, sizeof(attr));
}

/* Little-endian integers of 1..8 bytes. */
static void store_le(uint8_t *buf, uint64_t v, Py_ssize_t size)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	/* the hot sizes as single stores (a later single load of them then forwards) */
	if (size == 8) {
		memcpy(buf, &v, 8);
		return;
	}
	if (size == 4) {
		uint32_t w = (uint32_t)v;

		memcpy(buf, &w, 4);
		return;
	}
#endif
	for (Py_ssize_t i = 0; i < size; i++)
		buf[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t load_le(const uint8_t *buf, Py_ssize_t size)
{
	uint64_t v = 0;

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	/* the hot sizes as single loads */
	if (size == 8) {
		memcpy(&v, buf, 8);
		return v;
	}
	if (size == 4) {
		uint32_t w;

		memcpy(&w, buf, 4);
		return w;
	}
#endif
	for (Py_ssize_t i = 0; i < size; i++)
		v |= (uint64_t)buf[i] << (8 * i);
	return v;
}

/*
 * An exact int as the value of the `size` little-endian bytes it encodes to (what load_le
 * of them gives); 0 on success, -1 (no exception set) when out of range.
 */
static int int_to_u64(PyObject *obj, Py_ssize_t size, int is_signed, uint64_t *out)
{
	if (is_signed) {
		int overflow;
		long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);

		if (overflow || (v == -1 && PyErr_Occurred())) {
			PyErr_Clear();
			return -1;
		}
		if (size < 8) {
			long long lim = 1LL << (8 * size - 1);

			if (v < -lim || v >= lim)
				return -1;
			*out = (uint64_t)v & ((1ULL << (8 * size)) - 1);
			return 0;
		}
		*out = (uint64_t)v;
		return 0;
	}
	unsigned long long v = PyLong_AsUnsignedLongLong(obj);

	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		return -1;
	}
	if (size < 8 && (v >> (8 * size)))
		return -1;
	*out = v;
	return 0;
}

/* Encode an exact int natively; 0 on success, -1 (no exception set) when out of range. */
static int int_to_le(PyObject *obj, Py_ssize_t size, int is_signed, uint8_t *buf)
{
	uint64_t v;

	if (int_to_u64(obj, size, is_signed, &v) < 0)
		return -1;
	store_le(buf, v, size);
	return 0;
}

static PyObject *int_from_le(const uint8_t *data, Py_ssize_t size, int is_signed)
{
	uint64_t v = load_le(data, size);

	/* PyLong_FromLong has CPython's fast path for small and one-digit values. */
	if (!is_signed)
		return v <= LONG_MAX ? PyLong_FromLong((long)v) : PyLong_FromUnsignedLongLong(v);
	if (size < 8 && (v >> (8 * size - 1)) & 1)
		v |= ~0ULL << (8 * size);
	return PyLong_FromLong((long)(int64_t)v);
}

typedef struct {
	PyObject_HEAD
	int mode;
	int fd;
	Py_ssize_t ksize;
	Py_ssize_t vsize;
	int kkind;
	int vkind;
	PyObject *kenc;   /* key codec's encode */
	PyObject *venc;   /* value codec's encode */
	PyObject *vdec;   /* value codec's decode */
	PyObject *table;  /* MODE_TABLE: dict key bytes -> value bytes/bytearray */
	PyObject *lookup; /* MODE_SLOW: callable(key bytes|None) -> value bytes */
	PyObject *update; /* not MODE_KERNEL: callable(key bytes, value bytes, flags) */
	PyObject *delete; /* not MODE_KERNEL: callable(key bytes) */
	int int_keys;     /* MODE_TABLE with an int key codec: key bytes are remembered */
	struct key_slot *slots; /* KEY_SLOTS of them, made on first use */
} MapCore;

/*
 * The key bytes of recently used int keys, direct-mapped by value: a table lookup of a
 * remembered key makes no bytes object and hashes nothing (bytes cache their hash). With an
 * int value codec the slot also keeps the int last decoded for the key and the raw value it
 * came from: while the value's bytes are unchanged the same int object is returned. It also
 * keeps the table's value object it found for the key, with the table's version then (PEP
 * 509's ma_version_tag, which every change of the dict moves on; CPython 3.11): while the
 * table is unchanged, that object is still the key's value, with no dict lookup (which
 * compares the key bytes with the table's own key object).
 */
#define KEY_SLOTS 1024
#if PY_VERSION_HEX < 0x030C0000  /* deprecated from 3.12 on, its low bits for watchers */
#define TABLE_VERSIONS 1
#endif

struct key_slot {
	uint64_t value;
	PyObject *bytes;
	uint64_t raw;       /* the value bytes `decoded` was made from */
	PyObject *decoded;  /* NULL until an int value was decoded for this key */
	uint64_t version;   /* the table's version when `found` was the key's value */
	PyObject *found;    /* that value, or NULL */
};

static void clear_slots(MapCore *self)
{
	if (!self->slots)
		return;
	for (int i = 0; i < KEY_SLOTS; i++) {
		Py_XDECREF(self->slots[i].bytes);
		Py_XDECREF(self->slots[i].decoded);
		Py_XDECREF(self->slots[i].found);
	}
	PyMem_Free(self->slots);
	self->slots = NULL;
}

/* fn(*args), holding fn: the call may run Python that sets the core up again. */
static PyObject *call_n(PyObject *fn, PyObject *const *args, size_t nargs)
{
	Py_INCREF(fn);
	PyObject *r = PyObject_Vectorcall(fn, args, nargs, NULL);

	Py_DECREF(fn);
	return r;
}

/* fn(arg), holding fn: the call may run Python that sets the core up again. */
static PyObject *call_one(PyObject *fn, PyObject *arg)
{
	Py_INCREF(fn);
	PyObject *r = PyObject_CallOneArg(fn, arg);

	Py_DECREF(fn);
	return r;
}

/* Raise self._error(err, command[, count]). Always returns NULL. */
static PyObject *raise_error(MapCore *self, int err, const char *command, Py_ssize_t count)
{
	PyObject *exc;

	if (count >= 0)
		exc = PyObject_CallMethod((PyObject *)self, "_error", "isn", err, command, count);
	else
		exc = PyObject_CallMethod((PyObject *)self, "_error", "is", err, command);
	if (exc) {
		PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
		Py_DECREF(exc);
	}
	return NULL;
}

/*
 * A key or value in bytes form: ptr points at `size` bytes (or is NULL for "no key"),
 * either inside `buf` or inside `obj` (a bytes object we hold a reference to).
 */
typedef struct {
	const void *ptr;
	PyObject *obj;
	uint8_t buf[8];
} Encoded;

static void encoded_release(Encoded *e)
{
	Py_CLEAR(e->obj);
}

static int encode(PyObject *codec_encode, int kind, Py_ssize_t size, PyObject *obj,
		  Encoded *out, const char *what)
{
	out->obj = NULL;
	out->ptr = NULL;
	if (kind == KIND_BYTES) {
		if (PyBytes_CheckExact(obj) && PyBytes_GET_SIZE(obj) == size) {
			Py_INCREF(obj);
			out->obj = obj;
			out->ptr = PyBytes_AS_STRING(obj);
			return 0;
		}
	} else if ((kind == KIND_UINT || kind == KIND_INT) && PyLong_CheckExact(obj)) {
		if (int_to_le(obj, size, kind == KIND_INT, out->buf) == 0) {
			out->ptr = out->buf;
			return 0;
		}
	}
	PyObject *b = call_one(codec_encode, obj);

	if (!b)
		return -1;
	if (b == Py_None) {
		Py_DECREF(b);
		return 0;
	}
	if (!PyBytes_Check(b) || PyBytes_GET_SIZE(b) != size) {
		PyErr_Format(PyExc_TypeError, "%s codec returned %R, expected %zd bytes", what, b,
			     size);
		Py_DECREF(b);
		return -1;
	}
	out->obj = b;
	out->ptr = PyBytes_AS_STRING(b);
	return 0;
}

/* The encoded bytes as a bytes object (new reference), or None. */
static PyObject *encoded_bytes(const Encoded *e, Py_ssize_t size)
{
	if (e->obj) {
		Py_INCREF(e->obj);
		return e->obj;
	}
	if (!e->ptr)
		Py_RETURN_NONE;
	return PyBytes_FromStringAndSize((const char *)e->ptr, size);
}

/* Decode `size` bytes at data; `whole` may be the exact bytes object holding them. */
static PyObject *decode_value(MapCore *self, const uint8_t *data, Py_ssize_t size,
			      PyObject *whole)
{
	switch (self->vkind) {
	case KIND_UINT:
	case KIND_INT:
		if (size <= 8)
			return int_from_le(data, size, self->vkind == KIND_INT);
		break;
	case KIND_BYTES:
		if (whole && PyBytes_CheckExact(whole)) {
			Py_INCREF(whole);
			return whole;
		}
		return PyBytes_FromStringAndSize((const char *)data, size);
	}
	PyObject *b;

	if (whole && PyBytes_CheckExact(whole)) {
		Py_INCREF(whole);
		b = whole;
	} else {
		b = PyBytes_FromStringAndSize((const char *)data, size);
		if (!b)
			return NULL;
	}
	PyObject *r = call_one(self->vdec, b);

	Py_DECREF(b);
	return r;
}

/*
 * The lookup behind m[k] and k in m. Returns a new reference, or NULL with an exception;
 * with `missing_ok`, ENOENT returns NULL with no exception set.
 */
static PyObject *table_value(MapCore *self, PyObject *kb, int missing_ok);
static PyObject *table_int_key(MapCore *self, uint64_t value, int missing_ok);

static PyObject *core_lookup(MapCore *self, PyObject *key, int missing_ok)
{
	Encoded k;
	PyObject *result = NULL;

	if (self->int_keys && PyLong_CheckExact(key)) {
		uint64_t value;

		/* Out of range: the codec below says why. */
		if (int_to_u64(key, self->ksize, self->kkind == KIND_INT, &value) == 0)
			return table_int_key(self, value, missing_ok);
	}
	if (encode(self->kenc, self->kkind, self->ksize, key, &k, "key") < 0)
		return NULL;

	if (self->mode == MODE_KERNEL) {
		int err;

		if ((self->vkind == KIND_UINT || self->vkind == KIND_INT) && self->vsize <= 8) {
			uint8_t buf[8];

			err = elem_op(CMD_MAP_LOOKUP_ELEM, self->fd, k.ptr, buf, 0);
			if (!err)
				result = int_from_le(buf, self->vsize, self->vkind == KIND_INT);
		} else {
			PyObject *b = PyBytes_FromStringAndSize(NULL, self->vsize);

			if (!b)
				goto out;
			err = elem_op(CMD_MAP_LOOKUP_ELEM, self->fd, k.ptr, PyBytes_AS_STRING(b), 0);
			if (!err)
				result = decode_value(self, (uint8_t *)PyBytes_AS_STRING(b),
						      self->vsize, b);
			Py_DECREF(b);
		}
		if (err && !(missing_ok && err == ENOENT))
			raise_error(self, err, "map_lookup_elem", -1);
		goto out;
	}

	PyObject *kb = encoded_bytes(&k, self->ksize);

	if (!kb)
		goto out;
	if (self->mode == MODE_TABLE) {
		result = table_value(self, kb, missing_ok);
	} else {
		PyObject *v = call_one(self->lookup, kb);

		if (v) {
			if (PyBytes_Check(v))
				result = decode_value(self, (uint8_t *)PyBytes_AS_STRING(v),
						      PyBytes_GET_SIZE(v), v);
			else
				PyErr_Format(PyExc_TypeError, "lookup returned %R, not bytes", v);
			Py_DECREF(v);
		} else if (missing_ok && PyErr_ExceptionMatches(PyExc_KeyError)) {
			PyErr_Clear();
		}
	}
	Py_DECREF(kb);
out:
	encoded_release(&k);
	return result;
}

/* MODE_TABLE: the value stored for key bytes `kb` in the backend's table, decoded. */
static PyObject *table_value(MapCore *self, PyObject *kb, int missing_ok)
{
	PyObject *result = NULL;
	PyObject *v = PyDict_GetItemWithError(self->table, kb);

	if (!v) {
		if (!PyErr_Occurred() && !missing_ok)
			raise_error(self, ENOENT, "map_lookup_elem", -1);
		return NULL;
	}
	Py_INCREF(v);
	if (PyBytes_CheckExact(v))
		result = decode_value(self, (uint8_t *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), v);
	else if (PyByteArray_CheckExact(v))
		result = decode_value(self, (uint8_t *)PyByteArray_AS_STRING(v),
				      PyByteArray_GET_SIZE(v), NULL);
	else
		PyErr_Format(PyExc_TypeError, "fast-ops table holds %R, not bytes", v);
	Py_DECREF(v);
	return result;
}

/*
 * MODE_TABLE with an int value codec: the int for the table's value of slot's key, the
 * slot's cached one while the value's bytes are unchanged. NULL with no exception when the
 * key is absent or the value is not vsize bytes: table_value then answers. No Python code
 * runs here, so the borrowed table value stays valid.
 */
static PyObject *slot_int_value(MapCore *self, struct key_slot *slot)
{
	PyObject *v;
	const uint8_t *data;
	Py_ssize_t size;

#ifdef TABLE_VERSIONS
	uint64_t version = PyDict_CheckExact(self->table)
		? ((PyDictObject *)self->table)->ma_version_tag : 0;

	if (slot->found && version && slot->version == version) {
		v = slot->found;
	} else {
		v = PyDict_GetItemWithError(self->table, slot->bytes);
		if (!v)
			return NULL;
		Py_XSETREF(slot->found, Py_NewRef(v));
		slot->version = version;
	}
#else
	v = PyDict_GetItemWithError(self->table, slot->bytes);
	if (!v)
		return NULL;
#endif
	if (PyByteArray_CheckExact(v)) {
		data = (const uint8_t *)PyByteArray_AS_STRING(v);
		size = PyByteArray_GET_SIZE(v);
	} else if (PyBytes_CheckExact(v)) {
		data = (const uint8_t *)PyBytes_AS_STRING(v);
		size = PyBytes_GET_SIZE(v);
	} else {
		return NULL;
	}
	if (size != self->vsize)
		return NULL;
	uint64_t raw = load_le(data, size);

	if (!slot->decoded || slot->raw != raw) {
		PyObject *decoded = int_from_le(data, size, self->vkind == KIND_INT);

		if (!decoded)
			return NULL;
		Py_XSETREF(slot->decoded, decoded);
		slot->raw = raw;
	}
	return Py_NewRef(slot->decoded);
}

/* MODE_TABLE, an int key given as the value of its ksize little-endian bytes. */
static PyObject *table_int_key(MapCore *self, uint64_t value, int missing_ok)
{
	if (!self->slots) {
		self->slots = PyMem_Calloc(KEY_SLOTS, sizeof(struct key_slot));
		if (!self->slots)
			return PyErr_NoMemory();
	}
	struct key_slot *slot = &self->slots[value % KEY_SLOTS];

	if (!slot->bytes || slot->value != value) {
		uint8_t le[8];

		store_le(le, value, self->ksize);
		PyObject *b = PyBytes_FromStringAndSize((const char *)le, self->ksize);

		if (!b)
			return NULL;
		Py_XSETREF(slot->bytes, b);
		Py_CLEAR(slot->decoded);
		Py_CLEAR(slot->found);
		slot->value = value;
	}
	if (self->vkind == KIND_UINT || self->vkind == KIND_INT) {
		PyObject *result = slot_int_value(self, slot);

		if (result || PyErr_Occurred())
			return result;
	}
	/* A reference of our own: a Python value codec may run and reuse the slot. */
	PyObject *kb = Py_NewRef(slot->bytes);
	PyObject *result = table_value(self, kb, missing_ok);

	Py_DECREF(kb);
	return result;
}

static PyObject *core_subscript(PyObject *self, PyObject *key)
{
	return core_lookup((MapCore *)self, key, 0);
}

static int core_contains(PyObject *self, PyObject *key)
{
	PyObject *v = core_lookup((MapCore *)self, key, 1);

	if (v) {
		Py_DECREF(v);
		return 1;
	}
	return PyErr_Occurred() ? -1 : 0;
}

static int core_update(MapCore *self, PyObject *key, PyObject *value, uint64_t flags)
{
	Encoded k, v;
	int rc = -1;

	if (encode(self->kenc, self->kkind, self->ksize, key, &k, "key") < 0)
		return -1;
	if (encode(self->venc, self->vkind, self->vsize, value, &v, "value") < 0) {
		encoded_release(&k);
		return -1;
	}
	if (self->mode == MODE_KERNEL) {
		int err = elem_op(CMD_MAP_UPDATE_ELEM, self->fd, k.ptr, (void *)v.ptr, flags);

		if (err)
			raise_error(self, err, "map_update_elem", -1);
		else
			rc = 0;
	} else {
		PyObject *kb = encoded_bytes(&k, self->ksize);
		PyObject *vb = kb ? encoded_bytes(&v, self->vsize) : NULL;
		PyObject *fl = vb ? PyLong_FromUnsignedLongLong(flags) : NULL;

		if (fl) {
			PyObject *args[] = {kb, vb, fl};
			PyObject *r = call_n(self->update, args, 3);

			if (r) {
				Py_DECREF(r);
				rc = 0;
			}
		}
		Py_XDECREF(kb);
		Py_XDECREF(vb);
		Py_XDECREF(fl);
	}
	encoded_release(&k);
	encoded_release(&v);
	return rc;
}

static int core_delete(MapCore *self, PyObject *key)
{
	Encoded k;
	int rc = -1;

	if (encode(self->kenc, self->kkind, self->ksize, key, &k, "key") < 0)
		return -1;
	if (self->mode == MODE_KERNEL) {
		int err = elem_op(CMD_MAP_DELETE_ELEM, self->fd, k.ptr, NULL, 0);

		if (err)
			raise_error(self, err, "map_delete_elem", -1);
		else
			rc = 0;
	} else {
		PyObject *kb = encoded_bytes(&k, self->ksize);

		if (kb) {
			PyObject *r = call_one(self->delete, kb);

			if (r) {
				Py_DECREF(r);
				rc = 0;
			}
			Py_DECREF(kb);
		}
	}
	encoded_release(&k);
	return rc;
}

static int core_ass_subscript(PyObject *self, PyObject *key, PyObject *value)
{
	if (value == NULL)
		return core_delete((MapCore *)self, key);
	return core_update((MapCore *)self, key, value, 0);
}

static PyObject *core_update_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 3) {
		PyErr_SetString(PyExc_TypeError, "_update(key, value, flags)");
		return NULL;
	}
	unsigned long long flags = PyLong_AsUnsignedLongLong(args[2]);

	if (flags == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (core_update((MapCore *)self, args[0], args[1], flags) < 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *core_setup(PyObject *op, PyObject *args)
{
	MapCore *self = (MapCore *)op;
	int mode, fd, kkind, vkind;
	Py_ssize_t ksize, vsize;
	PyObject *kenc, *venc, *vdec, *table, *lookup, *update, *delete;

	if (!PyArg_ParseTuple(args, "iinniiOOOOOOO:_core_setup", &mode, &fd, &ksize, &vsize,
			      &kkind, &vkind, &kenc, &venc, &vdec, &table, &lookup, &update,
			      &delete))
		return NULL;
	if (mode == MODE_TABLE && !PyDict_Check(table)) {
		PyErr_SetString(PyExc_TypeError, "table mode needs a dict");
		return NULL;
	}
	if (mode == MODE_SLOW && !PyCallable_Check(lookup)) {
		PyErr_SetString(PyExc_TypeError, "slow mode needs a lookup callable");
		return NULL;
	}
	if (mode != MODE_KERNEL && !(PyCallable_Check(update) && PyCallable_Check(delete))) {
		PyErr_SetString(PyExc_TypeError, "table and slow modes need update and delete "
				"callables");
		return NULL;
	}
	if ((kkind == KIND_UINT || kkind == KIND_INT) && ksize > 8)
		kkind = KIND_GENERIC;
	if ((vkind == KIND_UINT || vkind == KIND_INT) && vsize > 8)
		vkind = KIND_GENERIC;
	self->mode = mode;
	self->fd = fd;
	self->ksize = ksize;
	self->vsize = vsize;
	self->kkind = kkind;
	self->vkind = vkind;
	Py_XSETREF(self->kenc, Py_NewRef(kenc));
	Py_XSETREF(self->venc, Py_NewRef(venc));
	Py_XSETREF(self->vdec, Py_NewRef(vdec));
	Py_XSETREF(self->table, Py_NewRef(table));
	Py_XSETREF(self->lookup, Py_NewRef(lookup));
	Py_XSETREF(self->update, Py_NewRef(update));
	Py_XSETREF(self->delete, Py_NewRef(delete));
	clear_slots(self);
	self->int_keys = mode == MODE_TABLE && (kkind == KIND_UINT || kkind == KIND_INT);
	Py_RETURN_NONE;
}

static int core_init_check(MapCore *self)
{
	if (!self->kenc) {
		PyErr_SetString(PyExc_RuntimeError, "map core used before _core_setup");
		return -1;
	}
	return 0;
}

static PyObject *core_subscript_checked(PyObject *self, PyObject *key)
{
	if (core_init_check((MapCore *)self) < 0)
		return NULL;
	return core_subscript(self, key);
}

static int core_ass_subscript_checked(PyObject *self, PyObject *key, PyObject *value)
{
	if (core_init_check((MapCore *)self) < 0)
		return -1;
	return core_ass_subscript(self, key, value);
}

static int core_contains_checked(PyObject *self, PyObject *key)
{
	if (core_init_check((MapCore *)self) < 0)
		return -1;
	return core_contains(self, key);
}

static PyObject *core_update_checked(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (core_init_check((MapCore *)self) < 0)
		return NULL;
	return core_update_method(self, args, nargs);
}

/* The objects a MapCore owns, listed once for the GC's traverse and clear. */
#define CORE_REFS(X) X(kenc) X(venc) X(vdec) X(table) X(lookup) X(update) X(delete)
#define CORE_VISIT(field) Py_VISIT(self->field);
#define CORE_CLEAR(field) Py_CLEAR(self->field);

static int core_traverse(PyObject *op, visitproc visit, void *arg)
{
	MapCore *self = (MapCore *)op;

	Py_VISIT(Py_TYPE(op));
	CORE_REFS(CORE_VISIT)
	return 0;
}

static int core_clear(PyObject *op)
{
	MapCore *self = (MapCore *)op;

	CORE_REFS(CORE_CLEAR)
	clear_slots(self);
	return 0;
}

static void core_dealloc(PyObject *op)
{
	PyTypeObject *tp = Py_TYPE(op);

	PyObject_GC_UnTrack(op);
	core_clear(op);
	tp->tp_free(op);
	Py_DECREF(tp);
}

static PyMethodDef core_methods[] = {
	{"_core_setup", core_setup, METH_VARARGS,
	 "_core_setup(mode, fd, key_size, value_size, key_kind, value_kind, key_encode, "
	 "value_encode, value_decode, table, lookup, update, delete)"},
	{"_update", (PyCFunction)(void (*)(void))core_update_checked, METH_FASTCALL,
	 "_update(key, value, flags): one element update"},
	{NULL, NULL, 0, NULL},
};

static PyType_Slot core_slots[] = {
	{Py_mp_subscript, core_subscript_checked},
	{Py_mp_ass_subscript, core_ass_subscript_checked},
	{Py_sq_contains, core_contains_checked},
	{Py_tp_methods, core_methods},
	{Py_tp_traverse, core_traverse},
	{Py_tp_clear, core_clear},
	{Py_tp_dealloc, core_dealloc},
	{Py_tp_doc, "Hot element ops of pybpf.maps.Map (m[k], m[k] = v, del m[k], k in m)."},
	{0, NULL},
};

static PyType_Spec core_spec = {
	.name = "pybpf._accel.MapCore",
	.basicsize = sizeof(MapCore),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
	.slots = core_slots,
};

/* -- module functions: thin bpf(2) wrappers ------------------------------------------- */

static int opt_buffer(PyObject *obj, Py_buffer *view)
{
	if (obj == Py_None) {
		view->obj = NULL;
		view->buf = NULL;
		view->len = 0;
		return 0;
	}
	return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

static void opt_release(Py_buffer *view)
{
	if (view->obj)
		PyBuffer_Release(view);
}

/* A buffer of at least `need` bytes (flags: PyBUF_SIMPLE to read, PyBUF_WRITABLE to fill). */
static int sized_buffer(PyObject *obj, Py_buffer *view, int flags, Py_ssize_t need,
			const char *what)
{
	if (PyObject_GetBuffer(obj, view, flags) < 0)
		return -1;
	if (view->len < need) {
		PyErr_Format(PyExc_ValueError, "%s buffer is %zd bytes, %zd needed", what,
			     view->len, need);
		PyBuffer_Release(view);
		return -1;
	}
	return 0;
}

/* `count` little-endian integers of `size` bytes (1..8) at buf, as a list of ints. */
static PyObject *int_list(const uint8_t *buf, Py_ssize_t count, Py_ssize_t size, int is_signed)
{
	PyObject *list = PyList_New(count);

	if (!list)
		return NULL;
	for (Py_ssize_t i = 0; i < count; i++) {
		PyObject *v = int_from_le(buf + i * size, size, is_signed);

		if (!v) {
			Py_DECREF(list);
			return NULL;
		}
		PyList_SET_ITEM(list, i, v);
	}
	return list;
}

/* The decoded list for a codec kind the C side runs natively, else None. */
static PyObject *decoded(int kind, const void *buf, Py_ssize_t count, Py_ssize_t size)
{
	if ((kind == KIND_UINT || kind == KIND_INT) && size >= 1 && size <= 8)
		return int_list(buf, count, size, kind == KIND_INT);
	Py_RETURN_NONE;
}

/*
 * lookup_batch(fd, delete, token, key_size, value_size, keys, values, count, elem_flags,
 *              flags[, key_kind, value_kind]) -> (errno, count, out_token, keys, values)
 * keys/values are writable buffers of at least count * size bytes. The token is
 * max(key_size, 4) bytes (a bucket index for hash maps, a key for the generic ones);
 * out_token is None when the kernel wrote none. With an int codec kind the returned keys
 * (values) are the decoded list, else None (decode the buffer yourself).
 */
/* One batch command with the GIL released: its errno (0: success), the count the kernel
 * wrote back in *done. */
static int batch_cmd(int cmd, int fd, void *in_batch, void *out_batch, void *keys, void *values,
		     Py_ssize_t count, unsigned long long elem_flags, unsigned long long flags,
		     uint32_t *done)
{
	struct batch_attr attr;
	int err;

	memset(&attr, 0, sizeof(attr));
	attr.in_batch = (uint64_t)(uintptr_t)in_batch;
	attr.out_batch = (uint64_t)(uintptr_t)out_batch;
	attr.keys = (uint64_t)(uintptr_t)keys;
	attr.values = (uint64_t)(uintptr_t)values;
	attr.count = (uint32_t)count;
	attr.map_fd = (uint32_t)fd;
	attr.elem_flags = elem_flags;
	attr.flags = flags;
	Py_BEGIN_ALLOW_THREADS
	err = sys_bpf(cmd, &attr, sizeof(attr));
	Py_END_ALLOW_THREADS
	*done = attr.count;
	return err;
}

static PyObject *mod_lookup_batch(PyObject *m, PyObject *args)
{
	int fd, del;
	PyObject *token, *keys, *values;
	Py_ssize_t ksize, vsize, count;
	unsigned long long elem_flags, flags;
	int kkind = KIND_GENERIC, vkind = KIND_GENERIC;
	Py_buffer kb, vb, tb;

	if (!PyArg_ParseTuple(args, "ipOnnOOnKK|ii:lookup_batch", &fd, &del, &token, &ksize,
			      &vsize, &keys, &values, &count, &elem_flags, &flags, &kkind, &vkind))
		return NULL;
	if (count < 0 || count > UINT32_MAX || ksize < 0 || vsize < 0) {
		PyErr_SetString(PyExc_ValueError, "bad count or sizes");
		return NULL;
	}
	Py_ssize_t tsize = ksize > 4 ? ksize : 4;

	if (opt_buffer(token, &tb) < 0)
		return NULL;
	if (tb.obj && tb.len != tsize) {
		opt_release(&tb);
		return PyErr_Format(PyExc_ValueError, "batch token must be %zd bytes", tsize);
	}
	if (sized_buffer(keys, &kb, PyBUF_WRITABLE, count * ksize, "keys") < 0) {
		opt_release(&tb);
		return NULL;
	}
	if (sized_buffer(values, &vb, PyBUF_WRITABLE, count * vsize, "values") < 0) {
		opt_release(&tb);
		PyBuffer_Release(&kb);
		return NULL;
	}
	PyObject *out = PyBytes_FromStringAndSize(NULL, tsize);

	if (!out)
		goto fail;
	memset(PyBytes_AS_STRING(out), 0, tsize);

	uint32_t done;
	int err = batch_cmd(del ? CMD_MAP_LOOKUP_AND_DELETE_BATCH : CMD_MAP_LOOKUP_BATCH, fd,
			    tb.buf, PyBytes_AS_STRING(out), kb.buf, vb.buf, count, elem_flags,
			    flags, &done);

	opt_release(&tb);
	if (!(err == 0 || done > 0)) {
		Py_DECREF(out);
		out = Py_NewRef(Py_None);
	}
	PyObject *klist = decoded(kkind, kb.buf, done, ksize);
	PyObject *vlist = klist ? decoded(vkind, vb.buf, done, vsize) : NULL;

	PyBuffer_Release(&kb);
	PyBuffer_Release(&vb);
	if (!vlist) {
		Py_XDECREF(klist);
		Py_DECREF(out);
		return NULL;
	}
	return Py_BuildValue("iINNN", err, done, out, klist, vlist);
fail:
	opt_release(&tb);
	PyBuffer_Release(&kb);
	PyBuffer_Release(&vb);
	return NULL;
}

static PyObject *write_batch(int cmd, int fd, Py_buffer *kb, Py_buffer *vb, Py_ssize_t count,
			     unsigned long long elem_flags, unsigned long long flags)
{
	uint32_t done;
	int err = batch_cmd(cmd, fd, NULL, NULL, kb->buf, vb ? vb->buf : NULL, count, elem_flags,
			    flags, &done);

	return Py_BuildValue("iI", err, done);
}

/* A batch's count as the u32 attr field holds it (ValueError otherwise). */
static int check_batch_count(Py_ssize_t count)
{
	if (count < 0 || count > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError, "bad count");
		return -1;
	}
	return 0;
}

/* update_batch(fd, key_size, value_size, keys, values, count, elem_flags, flags)
 * -> (errno, count done) */
static PyObject *mod_update_batch(PyObject *m, PyObject *args)
{
	int fd;
	Py_ssize_t ksize, vsize, count;
	PyObject *keys, *values;
	unsigned long long elem_flags, flags;
	Py_buffer kb, vb;

	if (!PyArg_ParseTuple(args, "innOOnKK:update_batch", &fd, &ksize, &vsize, &keys, &values,
			      &count, &elem_flags, &flags))
		return NULL;
	if (check_batch_count(count) < 0)
		return NULL;
	if (sized_buffer(keys, &kb, PyBUF_SIMPLE, count * ksize, "keys") < 0)
		return NULL;
	if (sized_buffer(values, &vb, PyBUF_SIMPLE, count * vsize, "values") < 0) {
		PyBuffer_Release(&kb);
		return NULL;
	}
	PyObject *r = write_batch(CMD_MAP_UPDATE_BATCH, fd, &kb, &vb, count, elem_flags, flags);

	PyBuffer_Release(&kb);
	PyBuffer_Release(&vb);
	return r;
}

/* delete_batch(fd, key_size, keys, count, elem_flags, flags) -> (errno, count done) */
static PyObject *mod_delete_batch(PyObject *m, PyObject *args)
{
	int fd;
	Py_ssize_t ksize, count;
	PyObject *keys;
	unsigned long long elem_flags, flags;
	Py_buffer kb;

	if (!PyArg_ParseTuple(args, "inOnKK:delete_batch", &fd, &ksize, &keys, &count,
			      &elem_flags, &flags))
		return NULL;
	if (check_batch_count(count) < 0)
		return NULL;
	if (sized_buffer(keys, &kb, PyBUF_SIMPLE, count * ksize, "keys") < 0)
		return NULL;
	PyObject *r = write_batch(CMD_MAP_DELETE_BATCH, fd, &kb, NULL, count, elem_flags, flags);

	PyBuffer_Release(&kb);
	return r;
}

/* BPF_STX | BPF_ATOMIC read-modify-write ops (include/uapi/linux/bpf.h). */
enum {
	ATOMIC_ADD = 0x00, ATOMIC_OR = 0x40, ATOMIC_AND = 0x50, ATOMIC_XOR = 0xa0,
	ATOMIC_FETCH = 0x01, ATOMIC_XCHG = 0xe1, ATOMIC_CMPXCHG = 0xf1,
};

#define ATOMIC_RMW(bits, q, op, src, r0, old)                                           \
	do {                                                                            \
		uint##bits##_t expected_ = (uint##bits##_t)(r0);                        \
		switch (op) {                                                           \
		case ATOMIC_XCHG:                                                       \
			old = __atomic_exchange_n(q, (uint##bits##_t)(src), __ATOMIC_SEQ_CST); \
			break;                                                          \
		case ATOMIC_CMPXCHG:                                                    \
			__atomic_compare_exchange_n(q, &expected_, (uint##bits##_t)(src), 0, \
						    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
			old = expected_;                                                \
			break;                                                          \
		default:                                                                \
			switch ((op) & ~ATOMIC_FETCH) {                                 \
			case ATOMIC_ADD:                                                \
				old = __atomic_fetch_add(q, (uint##bits##_t)(src), __ATOMIC_SEQ_CST); \
				break;                                                  \
			case ATOMIC_OR:                                                 \
				old = __atomic_fetch_or(q, (uint##bits##_t)(src), __ATOMIC_SEQ_CST); \
				break;                                                  \
			case ATOMIC_AND:                                                \
				old = __atomic_fetch_and(q, (uint##bits##_t)(src), __ATOMIC_SEQ_CST); \
				break;                                                  \
			default:                                                        \
				old = __atomic_fetch_xor(q, (uint##bits##_t)(src), __ATOMIC_SEQ_CST); \
			}                                                               \
		}                                                                       \
	} while (0)

/*
 * atomic_rmw(buffer, offset, size, op, src, r0) -> old: the emulated engines' atomic on
 * plain memory (a map value, a stack), done as a hardware atomic so that Python engines and
 * compiled programs running at once without the GIL see one another's ops whole. TypeError
 * when it is not that (no writable buffer, out of bounds, size not 4 or 8, not aligned, an
 * op that is not a read-modify-write): the caller's checked path takes it.
 */
static PyObject *mod_atomic_rmw(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
	Py_buffer b;
	Py_ssize_t off, size;
	unsigned long long op, src, r0, old;

	if (nargs != 6) {
		PyErr_SetString(PyExc_TypeError, "atomic_rmw takes 6 arguments");
		return NULL;
	}
	off = PyLong_AsSsize_t(args[1]);
	size = PyLong_AsSsize_t(args[2]);
	op = PyLong_AsUnsignedLongLongMask(args[3]);
	src = PyLong_AsUnsignedLongLongMask(args[4]);
	r0 = PyLong_AsUnsignedLongLongMask(args[5]);
	if (PyErr_Occurred())
		return NULL;
	if (op != ATOMIC_XCHG && op != ATOMIC_CMPXCHG) {
		unsigned long long base = op & ~(unsigned long long)ATOMIC_FETCH;

		if (base != ATOMIC_ADD && base != ATOMIC_OR && base != ATOMIC_AND &&
		    base != ATOMIC_XOR) {
			PyErr_Format(PyExc_TypeError, "atomic op %#llx is not a read-modify-write", op);
			return NULL;
		}
	}
	if (PyObject_GetBuffer(args[0], &b, PyBUF_WRITABLE) < 0) {
		PyErr_Clear();
		PyErr_SetString(PyExc_TypeError, "not writable memory");
		return NULL;
	}
	char *p = (char *)b.buf + off;

	if ((size != 4 && size != 8) || off < 0 || off > b.len - size ||
	    ((uintptr_t)p & (uintptr_t)(size - 1))) {
		PyBuffer_Release(&b);
		PyErr_SetString(PyExc_TypeError, "not an aligned 4- or 8-byte word of the buffer");
		return NULL;
	}
	if (size == 8) {
		ATOMIC_RMW(64, (uint64_t *)p, op, src, r0, old);
	} else {
		ATOMIC_RMW(32, (uint32_t *)p, op, src, r0, old);
	}
	PyBuffer_Release(&b);
	return PyLong_FromUnsignedLongLong(old);
}

/*
 * The native tier's first lookup of a map value in a run (emulated/prog/native.py), called
 * from machine code without the GIL: what _Run.map_lookup does once Python's lookup found
 * the value, without Python code. ``st`` is the run's state, ``run`` three objects of it:
 * the run's rs.mem, rs.value_regions and exported (_Run.exported). The value's region
 * (rs.region_of: its number from the state's word ``next_region``); a value that is memory
 * reached natively (_Run.reach: an export, a BufferPin, kept in ``exported``; its address
 * in the value table at ``values``); the cache entry from ``home`` of the map's cache at
 * ``cache`` (its count of entries in use in the word before) filled with ``tag``, the
 * pointer and whether the value is local. Each returns the pointer, or 0 where Python must
 * do it (no such element yet, a value that is not plain memory, a full cache, an error:
 * cleared, Python's own lookup reports it).
 */
enum { RUN_MEM, RUN_VALUE_REGIONS, RUN_EXPORTED };

/* A bytearray's buffer held exported, as a memoryview of it holds it (Python's _Run.reach
 * keeps one), in one small object where a memoryview is two: the bytearray cannot move or
 * resize while it lives */
typedef struct {
	PyObject_HEAD
	Py_buffer view;
} BufferPin;

static void buffer_pin_dealloc(PyObject *op)
{
	PyBuffer_Release(&((BufferPin *)op)->view);
	PyObject_Free(op);
}

static PyTypeObject BufferPinType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pybpf._accel.BufferPin",
	.tp_basicsize = sizeof(BufferPin),
	.tp_dealloc = buffer_pin_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A buffer held exported for a native run (the run's _Run.exported holds it)",
};

static PyObject *buffer_pin(PyObject *obj)
{
	BufferPin *pin = PyObject_New(BufferPin, &BufferPinType);
	if (pin == NULL)
		return NULL;
	if (PyObject_GetBuffer(obj, &pin->view, PyBUF_SIMPLE) < 0) {
		pin->view.obj = NULL;  /* nothing to release */
		Py_DECREF(pin);
		return NULL;
	}
	return (PyObject *)pin;
}

struct native_state {
	int64_t next_region, values, value_slots, cache, entries;
};

/* Where a map value's bytes are and how many, or NULL: a bytearray's, or a writable
 * contiguous memoryview's (a value in a shared segment, emulated/maps/shared.py, which stays
 * mapped while the view lives) */
static char *value_memory(PyObject *value, Py_ssize_t *len)
{
	if (PyByteArray_CheckExact(value)) {
		*len = PyByteArray_GET_SIZE(value);
		return *len ? PyByteArray_AS_STRING(value) : NULL;
	}
	if (!PyMemoryView_Check(value))
		return NULL;
	Py_buffer *view = PyMemoryView_GET_BUFFER(value);
	if (view->readonly || view->len == 0 || !PyBuffer_IsContiguous(view, 'C')
	    || PyMemoryView_GET_BASE(value) == NULL)
		return NULL;
	*len = view->len;
	return view->buf;
}

/* the region numbers place_value gives and their pointers: the same at every run */
static IntCacheSlot region_numbers[INT_CACHE_SLOTS], region_pointers[INT_CACHE_SLOTS];

static uint64_t place_value(uint64_t *st, PyObject *const *run, const struct native_state *at,
			    PyObject *value, uint64_t tag, int64_t home, int local, int memory)
{
	PyObject *id = NULL, *pointer = NULL, *region_obj = NULL;
	uint64_t result = 0;
	Py_ssize_t len = 0;
	char *bytes = memory ? value_memory(value, &len) : NULL;
	if ((memory && bytes == NULL) || st[at->cache - 1] >= (uint64_t)at->entries)
		return 0;
	/* rs.region_of(value) */
	if ((id = PyLong_FromVoidPtr(value)) == NULL)
		goto out;
	pointer = PyDict_GetItemWithError(run[RUN_VALUE_REGIONS], id);
	uint64_t ptr;
	if (pointer != NULL) {
		Py_INCREF(pointer);
		ptr = PyLong_AsUnsignedLongLong(pointer);
		if (PyErr_Occurred())
			goto out;
	} else {
		uint64_t fresh = st[at->next_region];
		if (PyErr_Occurred() || (region_obj = cached_int(region_numbers, fresh)) == NULL
		    || (pointer = cached_int(region_pointers, fresh << 32)) == NULL
		    || PyDict_SetItem(run[RUN_MEM], region_obj, value) < 0
		    || PyDict_SetItem(run[RUN_VALUE_REGIONS], id, pointer) < 0)
			goto out;
		st[at->next_region] = fresh + 1;
		ptr = fresh << 32;
	}
	uint64_t region = ptr >> 32;
	/* _Run.reach(region) */
	uint64_t *slot = &st[at->values + 3 * (int64_t)(region & (uint64_t)(at->value_slots - 1))];
	if (memory && slot[0] != region) {
		if (region_obj == NULL && (region_obj = cached_int(region_numbers, region)) == NULL)
			goto out;
		PyObject *view = PyDict_GetItemWithError(run[RUN_EXPORTED], region_obj);
		if (view == NULL) {
			if (PyErr_Occurred() || (view = buffer_pin(value)) == NULL)
				goto out;
			int stored = PyDict_SetItem(run[RUN_EXPORTED], region_obj, view);
			Py_DECREF(view);  /* the dict holds it */
			if (stored < 0)
				goto out;
		}
		slot[0] = region;
		slot[1] = (uint64_t)(uintptr_t)bytes;
		slot[2] = (uint64_t)len;
	}
	/* _Run.cache_entry, then the entry */
	for (int64_t probe = 0; probe < at->entries; probe++) {
		uint64_t *entry = &st[at->cache + 3 * ((home + probe) & (at->entries - 1))];
		if (entry[0] == 0 || entry[0] == tag) {
			if (entry[0] == 0)
				st[at->cache - 1] += 1;
			entry[0] = tag;
			entry[1] = ptr;
			entry[2] = (uint64_t)local;
			result = ptr;
			break;
		}
	}
out:
	Py_XDECREF(id);
	Py_XDECREF(pointer);
	Py_XDECREF(region_obj);
	return result;
}

/* A hash element's slots (HtabElem's value and node, its LRU node's reference bit) at their
 * offsets in the element type last seen, found once per type from its member descriptors:
 * what the native tier reads of an element without an attribute lookup */
static struct {
	PyTypeObject *type;  /* a strong reference, or NULL */
	Py_ssize_t value, node, ref;
} elem_slots;

/* The offset of the object slot ``name`` (a __slots__ member) in instances of ``type``, or
 * -1 */
static Py_ssize_t slot_offset(PyTypeObject *type, const char *name)
{
	PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
	Py_ssize_t offset = -1;
	if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)
	    && ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX)
		offset = ((PyMemberDescrObject *)descr)->d_member->offset;
	Py_XDECREF(descr);
	PyErr_Clear();
	return offset;
}

/* ``elem``'s type's slots in elem_slots: 0, or -1 where it has not all three (Python reads
 * it then) */
static int bind_elem_slots(PyObject *elem)
{
	PyTypeObject *type = Py_TYPE(elem);
	if (type == elem_slots.type)
		return 0;
	Py_ssize_t value = slot_offset(type, "value"), node = slot_offset(type, "node");
	Py_ssize_t ref = slot_offset(type, "ref");
	if (value < 0 || node < 0 || ref < 0)
		return -1;
	Py_XSETREF(elem_slots.type, (PyTypeObject *)Py_NewRef(type));
	elem_slots.value = value;
	elem_slots.node = node;
	elem_slots.ref = ref;
	return 0;
}

/* elem.<slot at offset>, borrowed; NULL (no exception) where it is unset */
static inline PyObject *elem_slot(PyObject *elem, Py_ssize_t offset)
{
	return *(PyObject **)((char *)elem + offset);
}

/* The value object of ``elem`` (per-CPU: its slot ``cpu``, else -1), borrowed, or NULL
 * where it is not what the element's slots hold */
static PyObject *elem_value(PyObject *elem, int64_t cpu)
{
	PyObject *value = elem_slot(elem, elem_slots.value);
	if (value != NULL && cpu >= 0)
		value = PyList_Check(value) && cpu < PyList_GET_SIZE(value)
			? PyList_GET_ITEM(value, cpu) : NULL;
	return value;
}

/* The element the ``size`` key bytes at ``key`` name in ``table`` (a dict of key bytes to
 * HtabElem), borrowed (the dict holds it), its type's slots bound; NULL where there is none,
 * with an exception where Python must find it */
static PyObject *find_elem(PyObject *table, const char *key, int64_t size)
{
	PyObject *kb = PyBytes_FromStringAndSize(key, size);
	PyObject *elem = kb == NULL ? NULL : PyDict_GetItemWithError(table, kb);
	Py_XDECREF(kb);
	if (elem != NULL && bind_elem_slots(elem) < 0) {
		PyErr_SetString(PyExc_TypeError, "a hash map's element without its slots");
		return NULL;
	}
	return elem;
}

/* The native tier's hash map lookup (the machine code's @htab_lookup): the address of the
 * value object (``cpu`` as elem_value's) of the element the ``size`` key bytes at ``key``
 * name in ``table`` (a dict of key bytes to HtabElem), 0 where there is none, or UINT64_MAX
 * where Python must do it (an error, cleared: Python's lookup reports it); with ``ref``, the
 * element's LRU reference bit set first (bpf_lru_node_set_ref). The address only keys the
 * run's cache of values registered for it, which stay alive. Called without the GIL. */
uint64_t pybpf_native_htab_lookup(PyObject *table, const char *key, int64_t size, int64_t cpu,
				  int64_t ref)
{
	HelperGil gil = helper_gil_take();
	PyObject *elem = find_elem(table, key, size), *value;
	uint64_t result = UINT64_MAX;
	if (elem == NULL) {
		if (!PyErr_Occurred())
			result = 0;
		goto out;
	}
	if (ref) {
		PyObject *bit = elem_slot(elem, elem_slots.ref);
		int set = bit == NULL ? -1 : PyObject_IsTrue(bit);
		if (set < 0)
			goto out;
		if (!set) {  /* node.ref = 1 */
			*(PyObject **)((char *)elem + elem_slots.ref) = PyLong_FromLong(1);
			Py_DECREF(bit);
		}
	}
	if ((value = elem_value(elem, cpu)) != NULL)
		result = (uint64_t)(uintptr_t)value;
out:
	PyErr_Clear();
	helper_gil_give(gil);
	return result;
}

/* A hash map's: the element of the ``key_size`` bytes at ``key`` in ``table``, its value
 * (per-CPU: slot ``cpu``, else -1), tagged with its address; local when per-CPU or on
 * ``node``. */
uint64_t pybpf_native_value(uint64_t *st, PyObject *const *run, PyObject *table,
			    const char *key, int64_t key_size, int64_t cpu, int64_t next_region,
			    int64_t values, int64_t value_slots, int64_t cache, int64_t entries,
			    int64_t home, int64_t node)
{
	HelperGil gil = helper_gil_take();
	const struct native_state at = {next_region, values, value_slots, cache, entries};
	PyObject *elem = find_elem(table, key, key_size), *value;
	uint64_t result = 0;
	if (elem == NULL || (value = elem_value(elem, cpu)) == NULL)
		goto out;
	int local = 1;
	if (cpu < 0) {  /* an element's value lives on its node; a CPU's own slot is local */
		PyObject *elem_node = elem_slot(elem, elem_slots.node);
		local = elem_node != NULL && PyLong_AsLongLong(elem_node) == node;
		if (elem_node == NULL || PyErr_Occurred())
			goto out;
	}
	Py_INCREF(value);  /* the element may go while place_value runs Python code */
	result = place_value(st, run, &at, value, (uint64_t)(uintptr_t)value, home, local, 1);
	Py_DECREF(value);
out:
	PyErr_Clear();  /* what went wrong, Python's own lookup meets and reports */
	helper_gil_give(gil);
	return result;
}

/* An array's: element ``index`` of ``elems`` (an index's buffer, or per-CPU its list of
 * slots, of which ``cpu``'s; an element not made yet is Python's to make), tagged index + 1
 * with its home the index; ``local`` as the caller knows it. ``memory`` 0: the elements are
 * objects a program only hands to helpers (an ARRAY_OF_MAPS's inner maps, ``elems`` its
 * ptrs; an empty slot is Python's), given their region, not reached as memory. */
uint64_t pybpf_native_array_value(uint64_t *st, PyObject *const *run, PyObject *elems,
				  uint64_t index, int64_t cpu, int64_t local, int64_t memory,
				  int64_t next_region, int64_t values, int64_t value_slots,
				  int64_t cache, int64_t entries)
{
	HelperGil gil = helper_gil_take();
	const struct native_state at = {next_region, values, value_slots, cache, entries};
	PyObject *key = PyLong_FromUnsignedLongLong(index), *value = NULL;
	uint64_t result = 0;
	if (key != NULL && (value = PyDict_GetItemWithError(elems, key)) != NULL) {
		if (cpu >= 0)
			value = PyList_Check(value) && cpu < PyList_GET_SIZE(value)
				? PyList_GET_ITEM(value, cpu) : NULL;
		if (value != NULL) {
			Py_INCREF(value);
			result = place_value(st, run, &at, value, index + 1,
					     (int64_t)(index & (uint64_t)(entries - 1)), local != 0,
					     memory != 0);
			Py_DECREF(value);
		}
	}
	if (PyErr_Occurred())
		PyErr_Clear();
	Py_XDECREF(key);
	helper_gil_give(gil);
	return result;
}

/*
 * call_native(function, state, r1, r2, r3, r4, r5, keep_gil) -> r0: a program compiled by the
 * native tier (emulated/prog/native.py), its entry at address ``function`` called with its
 * run's state and R1-R5 (u64), without the GIL (compiled code takes it back to call Python),
 * or with it where ``keep_gil`` (a run whose work all needs it: modeled time is charged with
 * it held, and taking it back each time costs more); ctypes takes about ten times as long.
 */
typedef uint64_t (*native_entry)(void *, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

static PyObject *mod_call_native(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
	uint64_t a[7];

	if (nargs != 8) {
		PyErr_SetString(PyExc_TypeError, "call_native takes 8 arguments");
		return NULL;
	}
	int keep_gil = PyObject_IsTrue(args[7]);
	if (keep_gil < 0)
		return NULL;
	for (int i = 0; i < 7; i++) {
		a[i] = PyLong_AsUnsignedLongLongMask(args[i]);
		if (a[i] == (uint64_t)-1 && PyErr_Occurred())
			return NULL;
	}
	if (a[0] == 0 || a[1] == 0) {
		PyErr_SetString(PyExc_ValueError, "call_native: no function or no state");
		return NULL;
	}
	uint64_t r0;
	native_entry entry = (native_entry)(uintptr_t)a[0];
	if (keep_gil) {
		r0 = entry((void *)(uintptr_t)a[1], a[2], a[3], a[4], a[5], a[6]);
	} else {
		Py_BEGIN_ALLOW_THREADS
		r0 = entry((void *)(uintptr_t)a[1], a[2], a[3], a[4], a[5], a[6]);
		Py_END_ALLOW_THREADS
	}
	return PyLong_FromUnsignedLongLong(r0);
}

/*
 * buffer_address(buffer) -> int: where a buffer's bytes are (the native tier reaches a map
 * value there, its caller holding an export, so they stay there; or a
 * tracepoint's record, bytes, which never move). TypeError for what is not contiguous memory.
 */
static PyObject *mod_buffer_address(PyObject *m, PyObject *buffer)
{
	Py_buffer b;

	if (PyObject_GetBuffer(buffer, &b, PyBUF_C_CONTIGUOUS) < 0) {
		PyErr_Clear();
		PyErr_SetString(PyExc_TypeError, "not contiguous memory");
		return NULL;
	}
	PyObject *address = PyLong_FromVoidPtr(b.buf);
	PyBuffer_Release(&b);
	return address;
}

static PyMethodDef module_methods[] = {
	{"lookup_batch", mod_lookup_batch, METH_VARARGS,
	 "lookup_batch(fd, delete, token|None, key_size, value_size, keys, values, count, "
	 "elem_flags, flags[, key_kind, value_kind]) -> (errno, count, out_token|None, "
	 "keys|None, values|None)"},
	{"update_batch", mod_update_batch, METH_VARARGS,
	 "update_batch(fd, key_size, value_size, keys, values, count, elem_flags, flags) -> "
	 "(errno, count)"},
	{"delete_batch", mod_delete_batch, METH_VARARGS,
	 "delete_batch(fd, key_size, keys, count, elem_flags, flags) -> (errno, count)"},
	{"atomic_rmw", (PyCFunction)(void (*)(void))mod_atomic_rmw, METH_FASTCALL,
	 "atomic_rmw(buffer, offset, size, op, src, r0) -> old (a hardware atomic; TypeError "
	 "when not an aligned word of writable memory)"},
	{"call_native", (PyCFunction)(void (*)(void))mod_call_native, METH_FASTCALL,
	 "call_native(function, state, r1, r2, r3, r4, r5, keep_gil) -> r0: a native-tier "
	 "program's entry called without the GIL (unless keep_gil)"},
	{"buffer_address", mod_buffer_address, METH_O,
	 "buffer_address(buffer) -> int: where a buffer's bytes are (TypeError when not "
	 "contiguous memory)"},
	{NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *module)
{
	if (PyType_Ready(&BufferPinType) < 0)
		return -1;
	PyObject *core = PyType_FromModuleAndSpec(module, &core_spec, NULL);

	if (!core)
		return -1;
	if (PyModule_AddObject(module, "MapCore", core) < 0) {
		Py_DECREF(core);
		return -1;
	}
	return 0;
}

static PyModuleDef_Slot module_slots[] = {
	{Py_mod_exec, module_exec},
	{0, NULL},
};

static struct PyModuleDef accel_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "pybpf._accel",
	.m_doc = "Optional C accelerator of pybpf's Map layer (bpf(2) without ctypes).",
	.m_size = 0,
	.m_methods = module_methods,
	.m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__accel(void)
{
	return PyModuleDef_Init(&accel_module);
}
