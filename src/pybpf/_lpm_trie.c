/*
 * trie_lookup_elem's walk (kernel/bpf/lpm_trie.c) in C: LpmTrie._trie_lookup's loop over its
 * nodes (pybpf/emulated/maps/lpm_trie.py, trie_walk there is the reference), reading the
 * nodes' fields at their slots. A program's LPM lookup walks a node per prefix bit it
 * matches, each a handful of attribute reads and big-int operations in Python.
 */
#include "_cache_model.h"

enum { NODE_CHILD, NODE_PREFIXLEN, NODE_INTERMEDIATE, NODE_DATA, NODE_FIELDS };

static PyTypeObject *node_type;  /* LpmTrieNode, bound by the first walk */
static Py_ssize_t node_offset[NODE_FIELDS];

static int bind_node_type(void)
{
	static const char *const names[NODE_FIELDS] = {
		[NODE_CHILD] = "child", [NODE_PREFIXLEN] = "prefixlen",
		[NODE_INTERMEDIATE] = "intermediate", [NODE_DATA] = "data",
	};
	PyObject *type = node_class("pybpf.emulated.maps.lpm_trie", "LpmTrieNode");
	if (type == NULL)
		return -1;
	for (int f = 0; f < NODE_FIELDS; f++) {
		PyObject *name = PyUnicode_InternFromString(names[f]);
		int rc = name == NULL ? -1 : slot_offset(type, name, &node_offset[f]);
		Py_XDECREF(name);
		if (rc < 0) {
			Py_DECREF(type);
			return -1;
		}
	}
	node_type = (PyTypeObject *)type;  /* kept for good, as its module keeps it */
	return 0;
}

/* A node's field (borrowed), or NULL with an exception where it is unset */
static PyObject *field(PyObject *node, int f)
{
	PyObject *value = *(PyObject **)((char *)node + node_offset[f]);
	if (value == NULL)
		PyErr_Format(PyExc_AttributeError, "an LPM trie node without its field %d", f);
	return value;
}

/* The leading bits a and b have in common, of their ``size`` bytes */
static long common_bits(const unsigned char *a, const unsigned char *b, Py_ssize_t size)
{
	for (Py_ssize_t i = 0; i < size; i++)
		if (a[i] != b[i])
			return 8 * i + __builtin_clz((unsigned)(a[i] ^ b[i])) - 24;
	return 8 * size;
}

PyObject *lpm_trie_walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
	Py_ssize_t data_size;
	if (nargs != 3 || (data_size = PyLong_AsSsize_t(args[2])) < 0) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "lpm_trie_walk(root, key, data_size)");
		return NULL;
	}
	if (node_type == NULL && bind_node_type() < 0)
		return NULL;
	Py_buffer key;
	if (PyObject_GetBuffer(args[1], &key, PyBUF_SIMPLE) < 0)
		return NULL;
	PyObject *found = Py_None;
	if (key.len < 4 + data_size) {
		PyErr_Format(PyExc_ValueError, "an LPM key of %zd bytes, not 4 + %zd", key.len,
			     data_size);
		found = NULL;
		goto out;
	}
	const unsigned char *k = key.buf, *data = k + 4;
	long prefixlen = k[0] | k[1] << 8 | k[2] << 16 | (long)k[3] << 24;
	long max_prefixlen = 8 * data_size;
	if (prefixlen > max_prefixlen)
		goto out;
	PyObject *node = args[0];
	while (node != Py_None) {
		PyObject *obj;
		if (Py_TYPE(node) != node_type) {
			PyErr_Format(PyExc_TypeError, "an LPM trie node, not %.100s",
				     Py_TYPE(node)->tp_name);
			found = NULL;
			goto out;
		}
		long node_prefixlen;
		if ((obj = field(node, NODE_PREFIXLEN)) == NULL
		    || ((node_prefixlen = PyLong_AsLong(obj)) == -1 && PyErr_Occurred())
		    || (obj = field(node, NODE_DATA)) == NULL) {
			found = NULL;
			goto out;
		}
		if (!PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != data_size) {
			PyErr_SetString(PyExc_TypeError, "an LPM trie node's data is the key's");
			found = NULL;
			goto out;
		}
		/* __longest_prefix_match: common leading bits, capped by both prefix lengths */
		long matchlen = common_bits((const unsigned char *)PyBytes_AS_STRING(obj), data,
					    data_size);
		if (matchlen > node_prefixlen)
			matchlen = node_prefixlen;
		if (matchlen > prefixlen)
			matchlen = prefixlen;
		if (matchlen == max_prefixlen) {
			found = node;
			break;
		}
		if (matchlen < node_prefixlen)
			break;
		int intermediate = (obj = field(node, NODE_INTERMEDIATE)) == NULL ? -1
			: PyObject_IsTrue(obj);
		if (intermediate < 0) {
			found = NULL;
			goto out;
		}
		if (!intermediate)
			found = node;
		/* the child the first bit after the node's prefix names */
		int bit = data[node_prefixlen >> 3] >> (7 - (node_prefixlen & 7)) & 1;
		if ((obj = field(node, NODE_CHILD)) == NULL) {
			found = NULL;
			goto out;
		}
		if (!PyList_Check(obj) || PyList_GET_SIZE(obj) != 2) {
			PyErr_SetString(PyExc_TypeError, "an LPM trie node has two children");
			found = NULL;
			goto out;
		}
		node = PyList_GET_ITEM(obj, bit);
	}
out:
	PyBuffer_Release(&key);
	return Py_XNewRef(found);
}
