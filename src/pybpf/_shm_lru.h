/*
 * The BPF LRU of a shared segment's LRU_HASH and LRU_PERCPU_HASH maps (kernel/bpf/
 * bpf_lru_list.c, Linux 6.16+ form), included by _shm_maps.c. The lists, moves, rotation,
 * shrinking and stealing are pybpf/emulated/maps/bpf_lru_list.py's, its reference, step for
 * step (the tests hold the two to the same evictions); what differs is where they live:
 *
 * - A node is a struct lru_node in one array of the segment, addressed by index: node i of
 *   the array is element slot i's (the kernel embeds it in the element; a separate array
 *   leaves the element layout the hash map's), and the list heads (list_head sentinels)
 *   follow the max_entries nodes. An LRU map is always preallocated, so every node exists
 *   from create, on the FREE list(s), as bpf_lru_populate puts them.
 * - The locks are the segment's spin locks (pid-owned words; a dead owner gives EOWNERDEAD):
 *   the common lists' one, each CPU's local lists', or each CPU's list set's (BPF_F_NO_COMMON_
 *   LRU). Lock order is the kernel's: a CPU's local lists, then the common lists, then a
 *   bucket (the eviction callback); never a bucket and then an LRU lock.
 * - A CPU is the emulated CPU the operation runs on (its caller's ``cpu``), not the host's.
 * - A lookup sets a node's reference bit without a lock, as bpf_lru_node_set_ref does.
 */

enum { LRU_ACTIVE, LRU_INACTIVE, LRU_FREE, LRU_LOCAL_FREE, LRU_LOCAL_PENDING };
#define LRU_NR_LIST_COUNT 2 /* ACTIVE and INACTIVE are counted */
#define LOCAL_FREE_TARGET 128
#define LOCAL_NR_SCANS LOCAL_FREE_TARGET
#define PERCPU_FREE_TARGET 4
#define PERCPU_NR_SCANS PERCPU_FREE_TARGET

struct lru_node { /* struct bpf_lru_node */
	uint32_t prev, next; /* node indices */
	uint8_t type, ref;
	uint16_t pad;
	uint32_t cpu;
};

/* struct bpf_lru_list: ACTIVE, INACTIVE and FREE, their heads the nodes heads + type */
struct lru_list {
	uint32_t lock;
	uint32_t counts[LRU_NR_LIST_COUNT];
	uint32_t rotation; /* next_inactive_rotation: a node */
	uint32_t heads;
	uint8_t pad[44];
};

/* struct bpf_lru_locallist: a CPU's LOCAL_FREE (head node heads) and LOCAL_PENDING (heads + 1) */
struct lru_local {
	uint32_t lock;
	uint32_t next_steal;
	uint32_t heads;
	uint8_t pad[52];
};

struct lru {
	MapObject *m;
	struct lru_node *nodes;
	struct lru_list *lists; /* the common one, or one per CPU (percpu) */
	struct lru_local *locals;
	uint32_t ncpus, nr_scans, target_free, percpu;
	int dead; /* the pid of a dead lock owner met, 0 when none */
};

static int htab_lru_map_delete_node(MapObject *m, uint32_t slot, int *dead);

static inline struct lru_node *N(struct lru *l, uint32_t id) { return &l->nodes[id]; }

static inline uint8_t node_ref(struct lru *l, uint32_t id)
{
	return __atomic_load_n(&N(l, id)->ref, __ATOMIC_RELAXED);
}

static inline void clear_ref(struct lru *l, uint32_t id)
{
	__atomic_store_n(&N(l, id)->ref, 0, __ATOMIC_RELAXED);
}

static inline void lru_unlink(struct lru *l, uint32_t id)
{
	struct lru_node *n = N(l, id);
	N(l, n->prev)->next = n->next;
	N(l, n->next)->prev = n->prev;
}

static inline void lru_add_front(struct lru *l, uint32_t id, uint32_t head)
{
	struct lru_node *n = N(l, id), *h = N(l, head);
	uint32_t first = h->next;
	n->prev = head;
	n->next = first;
	N(l, first)->prev = id;
	h->next = id;
}

static inline void init_head(struct lru_node *nodes, uint32_t head, uint8_t type)
{
	nodes[head] = (struct lru_node){.prev = head, .next = head, .type = type};
}

/* __bpf_lru_node_move: to the front of ACTIVE, INACTIVE or FREE, the reference bit cleared */
static void lru_move(struct lru *l, struct lru_list *lst, uint32_t id, uint8_t to)
{
	struct lru_node *n = N(l, id);
	if (n->type != to) {
		if (n->type < LRU_NR_LIST_COUNT)
			lst->counts[n->type]--;
		if (to < LRU_NR_LIST_COUNT)
			lst->counts[to]++;
		n->type = to;
	}
	clear_ref(l, id);
	if (id == lst->rotation)
		lst->rotation = n->prev;
	lru_unlink(l, id);
	lru_add_front(l, id, lst->heads + to);
}

/* __bpf_lru_node_move_in: a pending node enters ACTIVE or INACTIVE */
static void lru_move_in(struct lru *l, struct lru_list *lst, uint32_t id, uint8_t to)
{
	struct lru_node *n = N(l, id);
	lst->counts[to]++;
	n->type = to;
	clear_ref(l, id);
	lru_unlink(l, id);
	lru_add_front(l, id, lst->heads + to);
}

/* __bpf_lru_node_move_to_free (the reference bit kept, as the kernel keeps it) */
static void lru_move_to_free(struct lru *l, struct lru_list *lst, uint32_t id, uint32_t free_head,
			     uint8_t free_type)
{
	struct lru_node *n = N(l, id);
	if (id == lst->rotation)
		lst->rotation = n->prev;
	if (n->type < LRU_NR_LIST_COUNT)
		lst->counts[n->type]--;
	n->type = free_type;
	lru_unlink(l, id);
	lru_add_front(l, id, free_head);
}

/* -- rotation and shrinking ------------------------------------------------------------------ */

static void rotate_active(struct lru *l, struct lru_list *lst)
{
	uint32_t head = lst->heads + LRU_ACTIVE, first = N(l, head)->next, i = 0;
	for (uint32_t id = N(l, head)->prev, prev; id != head; id = prev) {
		prev = N(l, id)->prev;
		lru_move(l, lst, id, node_ref(l, id) ? LRU_ACTIVE : LRU_INACTIVE);
		if (++i == l->nr_scans || id == first)
			break;
	}
}

static void rotate_inactive(struct lru *l, struct lru_list *lst)
{
	uint32_t inactive = lst->heads + LRU_INACTIVE;
	if (N(l, inactive)->next == inactive)
		return;
	uint32_t last = N(l, lst->rotation)->next;
	if (last == inactive)
		last = N(l, last)->next;
	uint32_t cur = lst->rotation, next = inactive, i = 0;
	while (i < l->nr_scans) {
		if (cur == inactive) {
			cur = N(l, cur)->prev;
			continue;
		}
		next = N(l, cur)->prev;
		if (node_ref(l, cur))
			lru_move(l, lst, cur, LRU_ACTIVE);
		if (cur == last)
			break;
		cur = next;
		i++;
	}
	lst->rotation = next;
}

static void lru_rotate(struct lru *l, struct lru_list *lst)
{
	if (lst->counts[LRU_INACTIVE] < lst->counts[LRU_ACTIVE])
		rotate_active(l, lst);
	rotate_inactive(l, lst);
}

/* The eviction callback: unhash node id's element (0 when it is not hashed, or when its
 * bucket's lock is held by a dead process, which is noted) */
static int del_from_htab(struct lru *l, uint32_t id)
{
	int dead = 0, found = htab_lru_map_delete_node(l->m, id, &dead);
	if (dead)
		l->dead = dead;
	return found;
}

static uint32_t shrink_inactive(struct lru *l, struct lru_list *lst, uint32_t want,
				uint32_t free_head, uint8_t free_type)
{
	uint32_t head = lst->heads + LRU_INACTIVE, done = 0, i = 0;
	for (uint32_t id = N(l, head)->prev, prev; id != head; id = prev) {
		prev = N(l, id)->prev;
		if (node_ref(l, id)) {
			lru_move(l, lst, id, LRU_ACTIVE);
		} else if (del_from_htab(l, id)) {
			lru_move_to_free(l, lst, id, free_head, free_type);
			if (++done == want)
				break;
		}
		if (++i == l->nr_scans)
			break;
	}
	return done;
}

/* __bpf_lru_list_shrink: the inactive list's unreferenced nodes, else the first node from
 * the back of INACTIVE (or ACTIVE, INACTIVE being empty) that is hashed, whatever its bit */
static uint32_t lru_shrink(struct lru *l, struct lru_list *lst, uint32_t want, uint32_t free_head,
			   uint8_t free_type)
{
	uint32_t done = shrink_inactive(l, lst, want, free_head, free_type);
	if (done)
		return done;
	uint32_t victims = lst->heads + LRU_INACTIVE;
	if (N(l, victims)->next == victims)
		victims = lst->heads + LRU_ACTIVE;
	for (uint32_t id = N(l, victims)->prev, prev; id != victims; id = prev) {
		prev = N(l, id)->prev;
		if (del_from_htab(l, id)) {
			lru_move_to_free(l, lst, id, free_head, free_type);
			return 1;
		}
	}
	return 0;
}

/* -- the common LRU ------------------------------------------------------------------------- */

/* bpf_lru_list_pop_free_to_local, this CPU's local lists locked: flush its pending nodes,
 * rotate, take up to target_free free nodes, shrink for the rest */
static int pop_free_to_local(struct lru *l, struct lru_local *loc)
{
	struct lru_list *lst = l->lists;
	int dead = spin_lock(&lst->lock);
	if (dead)
		return dead;
	uint32_t pending = loc->heads + 1;
	for (uint32_t id = N(l, pending)->prev, prev; id != pending; id = prev) {
		prev = N(l, id)->prev;
		lru_move_in(l, lst, id, node_ref(l, id) ? LRU_ACTIVE : LRU_INACTIVE);
	}
	lru_rotate(l, lst);
	uint32_t free = lst->heads + LRU_FREE, taken = 0;
	for (uint32_t id = N(l, free)->next, next; id != free && taken < l->target_free;
	     id = next) {
		next = N(l, id)->next;
		lru_move_to_free(l, lst, id, loc->heads, LRU_LOCAL_FREE);
		taken++;
	}
	if (taken < l->target_free)
		lru_shrink(l, lst, l->target_free - taken, loc->heads, LRU_LOCAL_FREE);
	spin_unlock(&lst->lock);
	return 0;
}

static uint32_t local_pop_free(struct lru *l, struct lru_local *loc)
{
	uint32_t id = N(l, loc->heads)->next;
	if (id == loc->heads)
		return NIL;
	lru_unlink(l, id);
	return id;
}

/* __local_list_pop_pending: from the back, an unreferenced hashed node, else any hashed one */
static uint32_t local_pop_pending(struct lru *l, struct lru_local *loc)
{
	uint32_t pending = loc->heads + 1;
	for (int force = 0; force < 2; force++)
		for (uint32_t id = N(l, pending)->prev, prev; id != pending; id = prev) {
			prev = N(l, id)->prev;
			if ((force || !node_ref(l, id)) && del_from_htab(l, id)) {
				lru_unlink(l, id);
				return id;
			}
		}
	return NIL;
}

static void add_pending(struct lru *l, struct lru_local *loc, uint32_t cpu, uint32_t id)
{
	struct lru_node *n = N(l, id);
	n->cpu = cpu;
	n->type = LRU_LOCAL_PENDING;
	clear_ref(l, id);
	lru_add_front(l, id, loc->heads + 1);
}

/* The CPU's own lists had no node: one from the CPUs after it in turn (a free one, else a
 * pending one evicted), put on its pending list */
static uint32_t lru_steal(struct lru *l, struct lru_local *loc, uint32_t cpu)
{
	uint32_t first = loc->next_steal, steal = first, id;
	do {
		struct lru_local *victim = &l->locals[steal];
		int dead = spin_lock(&victim->lock);
		if (dead) {
			l->dead = dead;
			return NIL;
		}
		id = local_pop_free(l, victim);
		if (id == NIL)
			id = local_pop_pending(l, victim);
		spin_unlock(&victim->lock);
		steal = (steal + 1) % l->ncpus;
	} while (id == NIL && steal != first);
	loc->next_steal = steal;
	if (id != NIL) {
		int dead = spin_lock(&loc->lock);
		if (dead) {
			l->dead = dead;
			return NIL;
		}
		add_pending(l, loc, cpu, id);
		spin_unlock(&loc->lock);
	}
	return id;
}

static uint32_t common_pop_free(struct lru *l, uint32_t cpu)
{
	struct lru_local *loc = &l->locals[cpu];
	int dead = spin_lock(&loc->lock);
	if (dead) {
		l->dead = dead;
		return NIL;
	}
	uint32_t id = local_pop_free(l, loc);
	if (id == NIL) {
		if ((dead = pop_free_to_local(l, loc))) {
			spin_unlock(&loc->lock);
			l->dead = dead;
			return NIL;
		}
		id = local_pop_free(l, loc);
	}
	if (id != NIL) {
		add_pending(l, loc, cpu, id);
		spin_unlock(&loc->lock);
		return id;
	}
	spin_unlock(&loc->lock);
	return lru_steal(l, loc, cpu);
}

static int common_push_free(struct lru *l, uint32_t id)
{
	struct lru_node *n = N(l, id);
	int dead;
	if (__atomic_load_n(&n->type, __ATOMIC_RELAXED) == LRU_LOCAL_PENDING) {
		struct lru_local *loc = &l->locals[n->cpu];
		if ((dead = spin_lock(&loc->lock)))
			return dead;
		if (n->type == LRU_LOCAL_PENDING) {
			n->type = LRU_LOCAL_FREE;
			clear_ref(l, id);
			lru_unlink(l, id);
			lru_add_front(l, id, loc->heads);
			spin_unlock(&loc->lock);
			return 0;
		}
		spin_unlock(&loc->lock);
	}
	if ((dead = spin_lock(&l->lists->lock)))
		return dead;
	lru_move(l, l->lists, id, LRU_FREE);
	spin_unlock(&l->lists->lock);
	return 0;
}

/* -- the per-CPU LRU (BPF_F_NO_COMMON_LRU) -------------------------------------------------- */

static uint32_t percpu_pop_free(struct lru *l, uint32_t cpu)
{
	struct lru_list *lst = &l->lists[cpu];
	int dead = spin_lock(&lst->lock);
	if (dead) {
		l->dead = dead;
		return NIL;
	}
	lru_rotate(l, lst);
	uint32_t free = lst->heads + LRU_FREE;
	if (N(l, free)->next == free)
		lru_shrink(l, lst, PERCPU_FREE_TARGET, free, LRU_FREE);
	uint32_t id = N(l, free)->next;
	if (id == free) {
		id = NIL;
	} else {
		clear_ref(l, id);
		lru_move(l, lst, id, LRU_INACTIVE);
	}
	spin_unlock(&lst->lock);
	return id;
}

static int percpu_push_free(struct lru *l, uint32_t id)
{
	struct lru_list *lst = &l->lists[N(l, id)->cpu];
	int dead = spin_lock(&lst->lock);
	if (dead)
		return dead;
	lru_move(l, lst, id, LRU_FREE);
	spin_unlock(&lst->lock);
	return 0;
}

/* -- what the hash table calls ------------------------------------------------------------- */

static inline void lru_of(struct lru *l, MapObject *m)
{
	uint8_t *base = m->seg->base;
	struct map_hdr *h = (struct map_hdr *)(base + m->off);
	l->m = m;
	l->nodes = (struct lru_node *)(base + h->lru_nodes_off);
	l->lists = (struct lru_list *)(base + h->lru_lists_off);
	l->locals = (struct lru_local *)(base + h->lru_locals_off);
	l->ncpus = h->lru_cpus;
	l->percpu = (h->map_flags & BPF_F_NO_COMMON_LRU) != 0;
	l->nr_scans = l->percpu ? PERCPU_NR_SCANS : LOCAL_NR_SCANS;
	l->target_free = h->lru_target_free;
	l->dead = 0;
}

/* bpf_lru_pop_free: a free element's slot for an insert on CPU cpu, evicting if it must;
 * NIL when none (*dead: the pid of a dead lock owner that stopped it, else 0: ENOMEM) */
static uint32_t lru_pop_free(MapObject *m, uint32_t cpu, int *dead)
{
	struct lru l;
	lru_of(&l, m);
	uint32_t id = l.percpu ? percpu_pop_free(&l, cpu) : common_pop_free(&l, cpu);
	*dead = id == NIL ? l.dead : 0;
	return id;
}

/* bpf_lru_push_free: a deleted, replaced or unused element's slot back: 0, or a dead owner's
 * pid */
static int lru_push_free(MapObject *m, uint32_t slot)
{
	struct lru l;
	lru_of(&l, m);
	return l.percpu ? percpu_push_free(&l, slot) : common_push_free(&l, slot);
}

/* bpf_lru_node_set_ref: a program's lookup marks its element used */
static inline void lru_set_ref(uint8_t *base, struct map_hdr *h, uint32_t slot)
{
	uint8_t *ref = &((struct lru_node *)(base + h->lru_nodes_off))[slot].ref;
	if (!__atomic_load_n(ref, __ATOMIC_RELAXED))
		__atomic_store_n(ref, 1, __ATOMIC_RELAXED);
}

/* The bytes an LRU of max_entries nodes over ncpus CPUs takes after its elements: nodes and
 * heads, the list sets, the local lists (each rounded to HEAP_ALIGN) */
static uint64_t lru_bytes(uint32_t max_entries, uint32_t flags, uint32_t ncpus)
{
	int percpu = (flags & BPF_F_NO_COMMON_LRU) != 0;
	uint64_t heads = percpu ? 3ull * ncpus : 3 + 2ull * ncpus;
	return round_up64((max_entries + heads) * sizeof(struct lru_node), HEAP_ALIGN) +
	       (percpu ? ncpus : 1) * sizeof(struct lru_list) +
	       (percpu ? 0 : ncpus * sizeof(struct lru_local)) + 3 * HEAP_ALIGN;
}

/* bpf_lru_init and bpf_lru_populate of a new map's LRU: its memory from the segment heap at
 * *next (the segment lock held), every element's node on FREE (split evenly over the CPUs
 * for a per-CPU LRU, as bpf_percpu_lru_populate) */
static void lru_init(uint8_t *base, struct map_hdr *h, uint64_t *next)
{
	uint32_t ncpus = h->lru_cpus, n = h->max_entries;
	int percpu = (h->map_flags & BPF_F_NO_COMMON_LRU) != 0;
	uint32_t nlists = percpu ? ncpus : 1;
	uint64_t heads = percpu ? 3ull * ncpus : 3 + 2ull * ncpus;
	h->lru_nodes_off = round_up64(*next, HEAP_ALIGN);
	*next = h->lru_nodes_off + (n + heads) * sizeof(struct lru_node);
	h->lru_lists_off = round_up64(*next, HEAP_ALIGN);
	*next = h->lru_lists_off + nlists * sizeof(struct lru_list);
	h->lru_locals_off = round_up64(*next, HEAP_ALIGN);
	if (!percpu)
		*next = h->lru_locals_off + ncpus * sizeof(struct lru_local);
	uint32_t per_cpu = n / ncpus;
	h->lru_target_free = percpu ? PERCPU_FREE_TARGET
		: per_cpu / 2 < 1 ? 1 : per_cpu / 2 > LOCAL_FREE_TARGET ? LOCAL_FREE_TARGET
		: per_cpu / 2;
	struct lru l = {.nodes = (struct lru_node *)(base + h->lru_nodes_off),
			.lists = (struct lru_list *)(base + h->lru_lists_off),
			.locals = (struct lru_local *)(base + h->lru_locals_off)};
	memset(l.lists, 0, nlists * sizeof(struct lru_list));
	uint32_t head = n;
	for (uint32_t i = 0; i < nlists; i++, head += 3) {
		l.lists[i].heads = head;
		l.lists[i].rotation = head + LRU_INACTIVE;
		for (uint8_t t = LRU_ACTIVE; t <= LRU_FREE; t++)
			init_head(l.nodes, head + t, t);
	}
	if (!percpu) {
		memset(l.locals, 0, ncpus * sizeof(struct lru_local));
		for (uint32_t c = 0; c < ncpus; c++, head += 2) {
			l.locals[c].heads = head;
			l.locals[c].next_steal = c;
			init_head(l.nodes, head, LRU_LOCAL_FREE);
			init_head(l.nodes, head + 1, LRU_LOCAL_PENDING);
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t cpu = !percpu || !per_cpu ? 0 : i / per_cpu < ncpus ? i / per_cpu
			: ncpus - 1;
		l.nodes[i] = (struct lru_node){.type = LRU_FREE, .cpu = cpu};
		lru_add_front(&l, i, l.lists[percpu ? cpu : 0].heads + LRU_FREE);
	}
}

/* -- inspection ---------------------------------------------------------------------------- */

static int add_problem(PyObject *problems, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	PyObject *s = PyUnicode_FromFormatV(fmt, ap);
	va_end(ap);
	int rc = s == NULL ? -1 : PyList_Append(problems, s);
	Py_XDECREF(s);
	return rc;
}

/* Walk list ``head`` (nodes of type ``type``): links both ways, types, each node once
 * (``seen``); the number of its nodes, or -1 with an exception */
static long walk_list(struct lru *l, uint32_t head, uint8_t type, const char *name, uint32_t cpu,
		      uint8_t *seen, PyObject *problems)
{
	uint32_t n = l->m->max_entries;
	long count = 0;
	for (uint32_t id = N(l, head)->next; id != head; id = N(l, id)->next) {
		if (id >= n || N(l, N(l, id)->next)->prev != id || N(l, N(l, id)->prev)->next != id)
			return add_problem(problems, "cpu%u.%s: broken links", cpu, name) < 0 ? -1
				: count;
		if (N(l, id)->type != type &&
		    add_problem(problems, "cpu%u.%s: node %u of type %d", cpu, name, id,
				(int)N(l, id)->type) < 0)
			return -1;
		if (seen[id]++)
			return add_problem(problems, "cpu%u.%s: node %u on two lists (or a cycle)",
					   cpu, name, id) < 0 ? -1 : count;
		if (l->percpu && N(l, id)->cpu != cpu &&
		    add_problem(problems, "cpu%u.%s: node %u of cpu %u", cpu, name, id,
				N(l, id)->cpu) < 0)
			return -1;
		count++;
	}
	return count;
}

/* bpf_lru_list.py's check_invariants on the segment's lists, at rest: each list's links,
 * types and counters, the rotation cursor, every node on exactly one list, and as many nodes
 * in use (ACTIVE, INACTIVE, PENDING) as ``elements`` hashed. 0, or -1 with an exception. */
static int lru_problems(MapObject *m, uint32_t elements, PyObject *problems)
{
	static const char *const names[] = {"ACTIVE", "INACTIVE", "FREE", "LOCAL_FREE",
					    "LOCAL_PENDING"};
	struct lru l;
	lru_of(&l, m);
	uint8_t *seen = calloc(m->max_entries ? m->max_entries : 1, 1);
	if (!seen) {
		PyErr_NoMemory();
		return -1;
	}
	long in_use = 0, listed = 0, got;
	for (uint32_t i = 0; i < (l.percpu ? l.ncpus : 1); i++) {
		struct lru_list *lst = &l.lists[i];
		for (uint8_t t = LRU_ACTIVE; t <= LRU_FREE; t++) {
			if ((got = walk_list(&l, lst->heads + t, t, names[t], i, seen, problems)) < 0)
				goto fail;
			listed += got;
			if (t < LRU_NR_LIST_COUNT) {
				in_use += got;
				if (got != lst->counts[t] &&
				    add_problem(problems, "list %u: %s counter %u but %ld nodes", i,
						names[t], lst->counts[t], got) < 0)
					goto fail;
			}
		}
		uint32_t cur = lst->rotation;
		if (cur != lst->heads + LRU_INACTIVE &&
		    (cur >= m->max_entries || N(&l, cur)->type != LRU_INACTIVE) &&
		    add_problem(problems, "list %u: rotation cursor on node %u, not INACTIVE", i,
				cur) < 0)
			goto fail;
	}
	for (uint32_t c = 0; !l.percpu && c < l.ncpus; c++)
		for (uint8_t t = 0; t < 2; t++) {
			got = walk_list(&l, l.locals[c].heads + t, LRU_LOCAL_FREE + t,
					names[LRU_LOCAL_FREE + t], c, seen, problems);
			if (got < 0)
				goto fail;
			listed += got;
			in_use += t ? got : 0;
		}
	free(seen);
	if (listed != m->max_entries &&
	    add_problem(problems, "%ld node(s) on no list", (long)m->max_entries - listed) < 0)
		return -1;
	if (in_use != elements &&
	    add_problem(problems, "%ld LRU nodes in use but %u elements", in_use, elements) < 0)
		return -1;
	return 0;
fail:
	free(seen);
	return -1;
}
