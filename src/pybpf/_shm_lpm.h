/*
 * The LPM trie of a shared segment (kernel/bpf/lpm_trie.c, the >= 6.13 form), included by
 * _shm_maps.c. The trie's shape, its walks and its errno are pybpf/emulated/maps/lpm_trie.py's,
 * the reference the tests hold it to; what differs is where it lives:
 *
 * - A node is a slot of the map's pool (the hash maps' chunks: carved from the segment as the
 *   trie grows), addressed by index: struct lpm_node, the key's data at +16, the value at
 *   value_off. The pool holds 2 * max_entries nodes, enough for max_entries elements, the
 *   intermediate nodes between them (at most one fewer) and the node an update makes before
 *   it frees the one it replaces.
 * - The trie's root, lock and sequence count are the map's one struct bucket: updates and
 *   deletes hold the lock (trie->lock) and change the trie inside write_begin/write_end;
 *   lookups and get_next_key take no lock and walk again when the count moved (the kernel's
 *   walk under RCU). A freed node is reused at once, so a walk that raced a writer may read a
 *   reused node: the count sends it back, and a walk never goes further than the pool holds.
 * - Free nodes are on free list 0 (only writers, holding the lock, take and give them); the
 *   element count (n_entries) is that list's count.
 */

#define LPM_TREE_NODE_FLAG_IM 1u

struct lpm_node {
	uint32_t child[2];
	uint32_t prefixlen;
	uint32_t flags;
};

static inline struct lpm_node *lpm_node(MapObject *m, uint32_t slot)
{
	return (struct lpm_node *)slot_elem(m->seg->base, map_hdr(m), slot);
}

static inline const uint8_t *node_data(const struct lpm_node *n)
{
	return (const uint8_t *)n + sizeof(*n);
}

static inline uint32_t key_prefixlen(const uint8_t *key)
{
	uint32_t prefixlen;
	memcpy(&prefixlen, key, 4); /* host order, as the kernel reads it */
	return prefixlen;
}

static inline struct bucket *trie_of(MapObject *m)
{
	return (struct bucket *)(m->seg->base + map_hdr(m)->buckets_off);
}

/* __longest_prefix_match: the leading bits node's data and data have in common, at most
 * both prefix lengths */
static uint32_t longest_prefix_match(MapObject *m, const struct lpm_node *node,
				     uint32_t prefixlen, const uint8_t *data)
{
	uint32_t limit = node->prefixlen < prefixlen ? node->prefixlen : prefixlen, bits = 0;
	uint32_t size = m->key_size - 4, i = 0;
	const uint8_t *nd = node_data(node);
	/* eight bytes at a time, then four, then one, as the kernel compares words (big
	 * endian: the first differing bit is the highest set bit of the xor) */
	for (; i + 8 <= size && bits < limit; i += 8, bits += 64) {
		uint64_t a, b;
		memcpy(&a, nd + i, 8);
		memcpy(&b, data + i, 8);
		uint64_t diff = __builtin_bswap64(a ^ b);
		if (diff) {
			bits += __builtin_clzll(diff);
			return bits < limit ? bits : limit;
		}
	}
	if (i + 4 <= size && bits < limit) { /* an IPv4 address's four bytes at once */
		uint32_t a, b;
		memcpy(&a, nd + i, 4);
		memcpy(&b, data + i, 4);
		uint32_t diff = __builtin_bswap32(a ^ b);
		if (diff) {
			bits += __builtin_clz(diff);
			return bits < limit ? bits : limit;
		}
		i += 4;
		bits += 32;
	}
	for (; i < size && bits < limit; i++, bits += 8) {
		uint8_t diff = nd[i] ^ data[i];
		if (diff) {
			bits += __builtin_clz((unsigned)diff) - 24;
			break;
		}
	}
	return bits < limit ? bits : limit;
}

static inline uint32_t extract_bit(const uint8_t *data, uint32_t index)
{
	return (data[index / 8] >> (7 - index % 8)) & 1;
}

/* trie_lookup_elem's walk (the caller reads between read_begin and read_retry): the slot of
 * the longest prefix matching key, NIL when none */
static uint32_t lpm_walk(MapObject *m, const uint8_t *key)
{
	uint32_t prefixlen = key_prefixlen(key), max_prefixlen = 8 * (m->key_size - 4);
	if (prefixlen > max_prefixlen)
		return NIL;
	const uint8_t *data = key + 4;
	uint32_t found = NIL, steps = 0;
	for (uint32_t s = __atomic_load_n(&trie_of(m)->head, __ATOMIC_RELAXED);
	     s != NIL && s < m->capacity && steps++ <= max_prefixlen;) {
		const struct lpm_node *node = lpm_node(m, s);
		uint32_t node_prefixlen = __atomic_load_n(&node->prefixlen, __ATOMIC_RELAXED);
		if (node_prefixlen > max_prefixlen)
			return NIL; /* a reused node read half-written: the caller reads again */
		uint32_t matchlen = longest_prefix_match(m, node, prefixlen, data);
		if (matchlen == max_prefixlen)
			return s;
		if (matchlen < node_prefixlen)
			break;
		if (!(__atomic_load_n(&node->flags, __ATOMIC_RELAXED) & LPM_TREE_NODE_FLAG_IM))
			found = s;
		s = __atomic_load_n(&node->child[extract_bit(data, node_prefixlen)],
				    __ATOMIC_RELAXED);
	}
	return found;
}

/* The slot of key's longest prefix match, read consistently: NIL when none; *dead the pid of
 * a writer that died mid-change */
static uint32_t lpm_lookup(MapObject *m, const uint8_t *key, int *dead)
{
	struct bucket *t = trie_of(m);
	uint32_t start, s;
	do {
		if ((*dead = read_begin(&t->seq, &t->lock, &start)))
			return NIL;
		s = lpm_walk(m, key);
	} while (read_retry(&t->seq, start));
	return s;
}

/* A node from the pool (the trie's lock held): a free one, else the next chunk carved;
 * NIL when the segment has no room (*err ENOMEM) */
static uint32_t lpm_alloc(MapObject *m, int *err)
{
	uint8_t *base = m->seg->base;
	struct map_hdr *h = map_hdr(m);
	struct free_list *pool = free_lists(base, h);
	for (;;) {
		uint32_t s = list_pop(base, h, pool);
		if (s != NIL)
			return s;
		uint32_t c = 0;
		while (c < h->nchunks && __atomic_load_n(&h->chunks[c], __ATOMIC_ACQUIRE))
			c++;
		int dead = 0;
		*err = c < h->nchunks ? carve_chunk(base, h, c, 0, &dead) : ENOMEM;
		if (*err)
			return NIL;
	}
}

static inline void lpm_free(MapObject *m, uint32_t slot)
{
	list_push(m->seg->base, map_hdr(m), free_lists(m->seg->base, map_hdr(m)), slot);
}

/* trie_check_add_elem: EXIST finds nothing to replace, a full trie takes nothing more */
static int lpm_check_add(MapObject *m, uint64_t flags)
{
	int64_t *n_entries = &free_lists(m->seg->base, map_hdr(m))->count;
	if (flags == BPF_EXIST)
		return ENOENT;
	if (*n_entries == m->max_entries)
		return ENOSPC;
	++*n_entries;
	return 0;
}

static struct lpm_node *new_node(MapObject *m, uint32_t slot, uint32_t prefixlen,
				 const uint8_t *data, const uint8_t *value)
{
	struct lpm_node *n = lpm_node(m, slot);
	n->child[0] = n->child[1] = NIL;
	n->prefixlen = prefixlen;
	n->flags = value ? 0 : LPM_TREE_NODE_FLAG_IM;
	memcpy((uint8_t *)n + sizeof(*n), data, m->key_size - 4);
	if (value)
		memcpy((uint8_t *)n + m->value_off, value, m->value_size);
	return n;
}

/* trie_update_elem, the trie locked and the change inside its sequence count */
static int lpm_update_locked(MapObject *m, const uint8_t *key, const uint8_t *value,
			     uint64_t flags)
{
	struct bucket *t = trie_of(m);
	uint32_t prefixlen = key_prefixlen(key);
	const uint8_t *data = key + 4;
	int err = 0;
	uint32_t fresh = lpm_alloc(m, &err);
	if (fresh == NIL)
		return err;
	new_node(m, fresh, prefixlen, data, value);
	uint32_t *slot = &t->head, node = t->head, matchlen = 0;
	while (node != NIL) {
		struct lpm_node *n = lpm_node(m, node);
		matchlen = longest_prefix_match(m, n, prefixlen, data);
		if (n->prefixlen != matchlen || n->prefixlen == prefixlen)
			break;
		slot = &n->child[extract_bit(data, n->prefixlen)];
		node = *slot;
	}
	write_begin(&t->seq);
	if (node == NIL) {
		if (!(err = lpm_check_add(m, flags)))
			*slot = fresh;
		goto out;
	}
	struct lpm_node *n = lpm_node(m, node);
	if (n->prefixlen == matchlen) { /* same prefix: replace, or fill an intermediate node */
		if (!(n->flags & LPM_TREE_NODE_FLAG_IM))
			err = flags == BPF_NOEXIST ? EEXIST : 0;
		else
			err = lpm_check_add(m, flags);
		if (!err) {
			lpm_node(m, fresh)->child[0] = n->child[0];
			lpm_node(m, fresh)->child[1] = n->child[1];
			*slot = fresh;
			lpm_free(m, node);
		}
		goto out;
	}
	if ((err = lpm_check_add(m, flags)))
		goto out;
	if (matchlen == prefixlen) { /* the new prefix holds the node's: above it */
		lpm_node(m, fresh)->child[extract_bit(node_data(n), matchlen)] = node;
		*slot = fresh;
		goto out;
	}
	uint32_t im = lpm_alloc(m, &err);
	if (im == NIL) {
		--free_lists(m->seg->base, map_hdr(m))->count;
		goto out;
	}
	struct lpm_node *imn = new_node(m, im, matchlen, node_data(n), NULL);
	uint32_t bit = extract_bit(data, matchlen);
	imn->child[bit] = fresh;
	imn->child[!bit] = node;
	*slot = im;
out:
	write_end(&t->seq);
	if (err)
		lpm_free(m, fresh);
	return err;
}

/* trie_delete_elem, the trie locked and the change inside its sequence count */
static int lpm_delete_locked(MapObject *m, const uint8_t *key)
{
	struct bucket *t = trie_of(m);
	uint32_t prefixlen = key_prefixlen(key);
	const uint8_t *data = key + 4;
	uint32_t *trim = &t->head, *trim2 = trim, parent = NIL, node = t->head, matchlen = 0;
	while (node != NIL) {
		struct lpm_node *n = lpm_node(m, node);
		matchlen = longest_prefix_match(m, n, prefixlen, data);
		if (n->prefixlen != matchlen || n->prefixlen == prefixlen)
			break;
		parent = node;
		trim2 = trim;
		trim = &n->child[extract_bit(data, n->prefixlen)];
		node = *trim;
	}
	if (node == NIL)
		return ENOENT;
	struct lpm_node *n = lpm_node(m, node);
	if (n->prefixlen != prefixlen || n->prefixlen != matchlen ||
	    (n->flags & LPM_TREE_NODE_FLAG_IM))
		return ENOENT;
	write_begin(&t->seq);
	--free_lists(m->seg->base, map_hdr(m))->count;
	if (n->child[0] != NIL && n->child[1] != NIL) { /* it stays, as an intermediate node */
		n->flags |= LPM_TREE_NODE_FLAG_IM;
	} else if (parent != NIL && (lpm_node(m, parent)->flags & LPM_TREE_NODE_FLAG_IM) &&
		   n->child[0] == NIL && n->child[1] == NIL) {
		/* a leaf under an intermediate node: its sibling takes the parent's place */
		struct lpm_node *p = lpm_node(m, parent);
		*trim2 = p->child[0] == node ? p->child[1] : p->child[0];
		lpm_free(m, parent);
		lpm_free(m, node);
	} else {
		*trim = n->child[0] != NIL ? n->child[0] : n->child[1];
		lpm_free(m, node);
	}
	write_end(&t->seq);
	return 0;
}

/* update (flags, prefixlen checked first, as trie_update_elem) or delete under the lock:
 * 0 or the errno; *dead a dead owner of the lock */
static int lpm_update(MapObject *m, const uint8_t *key, const uint8_t *value, uint64_t flags,
		      int *dead)
{
	if (flags > BPF_EXIST || key_prefixlen(key) > 8 * (m->key_size - 4))
		return EINVAL;
	struct bucket *t = trie_of(m);
	if ((*dead = spin_lock(&t->lock)))
		return EOWNERDEAD;
	int err = lpm_update_locked(m, key, value, flags);
	spin_unlock(&t->lock);
	return err;
}

static int lpm_delete(MapObject *m, const uint8_t *key, int *dead)
{
	if (key_prefixlen(key) > 8 * (m->key_size - 4))
		return EINVAL;
	struct bucket *t = trie_of(m);
	if ((*dead = spin_lock(&t->lock)))
		return EOWNERDEAD;
	int err = lpm_delete_locked(m, key);
	spin_unlock(&t->lock);
	return err;
}

/* The first real node in post-order under root (trie_get_next_key's leftmost) */
static uint32_t lpm_leftmost(MapObject *m, uint32_t root)
{
	uint32_t next = root, steps = 0;
	for (uint32_t s = root; s != NIL && s < m->capacity && steps++ <= m->capacity;) {
		struct lpm_node *n = lpm_node(m, s);
		if (n->flags & LPM_TREE_NODE_FLAG_IM) {
			s = n->child[0];
		} else {
			next = s;
			s = n->child[0];
			if (s == NIL)
				s = n->child[1];
		}
	}
	return next;
}

/* trie_get_next_key's answer (the caller reads between read_begin and read_retry): the
 * slot whose key follows key in post-order (key NULL, missing or invalid: the leftmost),
 * NIL at the end (*empty: the trie has no element) */
static uint32_t lpm_next(MapObject *m, const uint8_t *key, int *empty)
{
	uint32_t root = __atomic_load_n(&trie_of(m)->head, __ATOMIC_RELAXED);
	*empty = root == NIL;
	if (root == NIL || root >= m->capacity)
		return NIL;
	uint32_t max_prefixlen = 8 * (m->key_size - 4);
	if (key == NULL || key_prefixlen(key) > max_prefixlen)
		return lpm_leftmost(m, root);
	uint32_t prefixlen = key_prefixlen(key), stack[LPM_DATA_SIZE_MAX * 8 + 2], depth = 0;
	const uint8_t *data = key + 4;
	uint32_t node = root, matchlen = 0;
	while (node != NIL && node < m->capacity && depth <= max_prefixlen) {
		struct lpm_node *n = lpm_node(m, node);
		stack[depth++] = node;
		matchlen = longest_prefix_match(m, n, prefixlen, data);
		if (n->prefixlen != matchlen || n->prefixlen == prefixlen)
			break;
		node = n->child[extract_bit(data, n->prefixlen)];
	}
	if (node == NIL || node >= m->capacity || depth > max_prefixlen ||
	    lpm_node(m, node)->prefixlen != matchlen ||
	    (lpm_node(m, node)->flags & LPM_TREE_NODE_FLAG_IM))
		return lpm_leftmost(m, root);
	node = stack[depth - 1];
	for (uint32_t d = depth - 1; d > 0; d--) {
		struct lpm_node *p = lpm_node(m, stack[d - 1]);
		if (p->child[0] == node && p->child[1] != NIL)
			return lpm_leftmost(m, p->child[1]);
		if (!(p->flags & LPM_TREE_NODE_FLAG_IM))
			return stack[d - 1];
		node = stack[d - 1];
	}
	return NIL;
}

/* The trie's shape at rest, as the reference's check_invariants: every intermediate node has
 * two children, a child extends its parent's prefix under the bit that follows it, each node
 * once, n_entries counts the real nodes and the free ones make up the rest of the pool
 * carved. 0, or -1 with an exception. */
static int lpm_problems(MapObject *m, uint32_t carved, PyObject *problems)
{
	uint8_t *seen = calloc(m->capacity, 1);
	uint32_t *stack = malloc(((size_t)m->capacity + 1) * sizeof(uint32_t));
	int rc = 0;
	if (!seen || !stack) {
		free(seen);
		free(stack);
		PyErr_NoMemory();
		return -1;
	}
	uint32_t depth = 0, real = 0, nodes = 0, free_nodes = 0;
	if (trie_of(m)->head != NIL)
		stack[depth++] = trie_of(m)->head;
	while (depth && rc == 0) {
		uint32_t s = stack[--depth];
		if (s >= m->capacity || seen[s]++) {
			rc = add_problem(problems, "node %u twice or out of range", s);
			break;
		}
		nodes++;
		struct lpm_node *n = lpm_node(m, s);
		if (n->flags & LPM_TREE_NODE_FLAG_IM) {
			if (n->child[0] == NIL || n->child[1] == NIL)
				rc = add_problem(problems, "intermediate node /%u lacks a child",
						 n->prefixlen);
		} else {
			real++;
		}
		for (int b = 0; b < 2 && rc == 0; b++) {
			uint32_t c = n->child[b];
			if (c == NIL)
				continue;
			if (c >= m->capacity) {
				rc = add_problem(problems, "a child out of range");
				break;
			}
			struct lpm_node *cn = lpm_node(m, c);
			if (cn->prefixlen <= n->prefixlen ||
			    longest_prefix_match(m, n, cn->prefixlen, node_data(cn)) != n->prefixlen ||
			    extract_bit(node_data(cn), n->prefixlen) != (uint32_t)b)
				rc = add_problem(problems, "/%u misplaced under /%u", cn->prefixlen,
						 n->prefixlen);
			stack[depth++] = c;
		}
	}
	free(stack);
	struct free_list *pool = free_lists(m->seg->base, map_hdr(m));
	for (uint32_t s = (uint32_t)pool->head; s != NIL && rc == 0;
	     s = ((struct helem *)slot_elem(m->seg->base, map_hdr(m), s))->next) {
		if (s >= m->capacity || seen[s]++) {
			rc = add_problem(problems, "free node %u in the trie, listed twice or out "
					 "of range", s);
			break;
		}
		free_nodes++;
	}
	free(seen);
	if (rc == 0 && real != pool->count)
		rc = add_problem(problems, "%u elements but n_entries %lld", real,
				 (long long)pool->count);
	if (rc == 0 && nodes + free_nodes != carved)
		rc = add_problem(problems, "%u nodes + %u free, but %u carved", nodes, free_nodes,
				 carved);
	return rc;
}
