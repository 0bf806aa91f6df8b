"""From measurements to a profile: each value and how it follows from the medians (written
into its ``source``), and the summary printed beside it."""

from __future__ import annotations

from ..bench import report
from ..profiles import Profile, Value, cycle_estimates, validate
from .native import CHASE_DRAM_BYTES
from .probes import READ_SOCKADDR, RET, TEST_RUN_PROBES, Samples, executed

# Not measurable from user space; see the sources these appear in.
IRQ_SAVE_RESTORE_CYCLES = 20
SLAB_FASTPATH_CYCLES = 25
# memcg accounting per object, scaled from SLAB_FASTPATH_CYCLES by Hou Tao's perf profile of
# map_perf_test 4 on bpf_mem_alloc with a call_rcu per element (bpf list, 28 Sep 2022):
# kmem_cache_alloc_node 2.62%; __get_obj_cgroup_from_memcg 4.53%, memcg_slab_post_alloc_hook
# 2.57%, obj_cgroup_charge 2.25%, mod_objcg_state 1.52% on the charge side. The free side
# mirrors the last two (refill_obj_stock, mod_objcg_state).
KMEM_CACHE_ALLOC_SHARE = 2.62
MEMCG_CHARGE_SHARE = 4.53 + 2.57 + 2.25 + 1.52
MEMCG_UNCHARGE_SHARE = 2.25 + 1.52
MEMCG_CHARGE_CYCLES = round(SLAB_FASTPATH_CYCLES * MEMCG_CHARGE_SHARE / KMEM_CACHE_ALLOC_SHARE)
MEMCG_UNCHARGE_CYCLES = round(SLAB_FASTPATH_CYCLES * MEMCG_UNCHARGE_SHARE
                              / KMEM_CACHE_ALLOC_SHARE)
MEMCG_PROFILE = ("Hou Tao's perf profile of map_perf_test 4 on bpf_mem_alloc with a call_rcu "
                 "per element (bpf list, 28 Sep 2022)")
SLAB_REFILL_CYCLES = 60
SLAB_FREE_REMOTE_CYCLES = 30
PAGE_ALLOC_CYCLES = 135
TICKS_PER_GRACE_PERIOD = 2


# -- from measurements to a profile --------------------------------------------------------

def _keep_levels_ordered(values: dict[str, Value], levels: tuple[str, ...]) -> None:
    """A farther memory level is never faster: one measured below the level before it (the
    chases hit the same level, as when the last-level cache is larger than the chase says,
    or a loaded host disturbed the nearer one) takes the nearer one's latency, said in its
    source."""
    for near, far in zip(levels, levels[1:], strict=False):
        lo, hi = values[f"memory.{near}"], values[f"memory.{far}"]
        if hi.value < lo.value:
            values[f"memory.{far}"] = Value(lo.value, f"{hi.source}; measured {hi.value} ns, "
                                            f"below memory.{near}, so raised to it")


def host_profile(samples: dict[str, Samples], host: dict) -> Profile:
    """The host profile: every value and how it follows from ``samples``."""
    values, reference = derive(samples, host)
    name = "host"
    description = (f"{host['hostname']}: {host['cpu_model']}, {host['cpus']} CPUs, "
                   f"{host['nodes']} NUMA node(s), Linux {host['kernel']}; calibrated "
                   f"{host['date']}")
    return validate(name, description, values, reference=reference)


def derive(samples: dict[str, Samples], host: dict) -> tuple[dict[str, Value], dict[str, Value]]:
    """(profile values, reference figures) from the medians, each with its derivation."""
    where = f"calibrated on {host['hostname']} by pybpf calibrate on {host['date']}"
    med = {name: s.median for name, s in samples.items()}
    values: dict[str, Value] = {}

    def put(path: str, value: float, how: str) -> None:
        if value < 0:
            how += f"; came out {value:.2f}, below the noise, so 0"
            value = 0.0
        values[path] = Value(round(value, 3) if isinstance(value, float) else value,
                             f"{where}: {how}")

    def cite(path: str, value, how: str) -> None:
        values[path] = Value(round(value, 3) if isinstance(value, float) else value, how)

    def seen(name: str) -> str:
        return f"{name} {samples[name].describe()}"

    # Instructions and calls, from the empty program up.
    ex = {p.name: p for p in TEST_RUN_PROBES}
    ins = {name: _executed_of(name) for name in ex}
    insn = (med["insns_1024"] - med["empty"]) / (ins["insns_1024"] - ins["empty"])
    put("cpu.bpf_insn", insn, f"(insns_1024 - empty) / {ins['insns_1024'] - ins['empty']} "
        f"instructions; {seen('insns_1024')}; {seen('empty')}")
    put("cpu.prog_test_run", med["empty"] - ins["empty"] * insn,
        f"empty program ({ins['empty']} instructions) less its instructions; {seen('empty')}")

    def per_op(name: str, helper_call: float = 0.0) -> float:
        p = ex[name]
        rest = (ins[name] - ins["empty"]) * insn + p.helper_calls * helper_call
        return (med[name] - med["empty"] - rest) / p.count

    helper = per_op("helper_64")
    put("cpu.helper_call", helper, f"64 bpf_get_numa_node_id calls less their instructions; "
        f"{seen('helper_64')}")
    put("ops.array_map_lookup_elem", per_op("array_lookup_64"),
        f"per lookup of 64, less the program's instructions; {seen('array_lookup_64')}")
    jhash = (per_op("htab_lookup_64_key64") - per_op("htab_lookup_64")) / 60
    put("cpu.jhash_byte", jhash, "(lookup with a 64-byte key - with a 4-byte key) / 60 bytes "
        f"(hash and key compare); {seen('htab_lookup_64_key64')}; {seen('htab_lookup_64')}")
    lookup = per_op("htab_lookup_64") - 4 * jhash
    put("ops.htab_map_lookup_elem", lookup,
        f"per lookup of 64 (4-byte key, hit), less 4 x jhash_byte; {seen('htab_lookup_64')}")

    atomic = med["lock_add"]
    put("cpu.atomic", atomic, f"lock add loop; {seen('lock_add')}")
    ghz = med["clock"]
    put("cpu.clock_ghz", ghz, "a chain of dependent adds (one per cycle) per ns of CPU time; "
        f"/proc/cpuinfo says {host['mhz']} MHz; {seen('clock')}")
    spin = atomic + IRQ_SAVE_RESTORE_CYCLES / ghz
    put("cpu.spin_lock", spin, f"estimate: atomic (the lock's locked op; the unlock is a plain "
        f"store on x86) + {IRQ_SAVE_RESTORE_CYCLES} cycles for pushf/cli/popf, which user "
        "space cannot time")
    update = per_op("htab_update_existing_64") - 4 * jhash - spin
    put("ops.htab_map_update_elem", update,
        "per update of an existing key of 64 (preallocated map: the new element is the CPU's "
        "spare, the old one becomes it, no free list), less 4 x jhash_byte and the bucket's "
        "spin_lock; " + seen("htab_update_existing_64"))
    triple_p = per_op("htab_triples_prealloc")
    put("ops.htab_map_delete_elem", triple_p - update - lookup - 12 * jhash - 4 * spin,
        "per (update, lookup, delete) of 10 on a preallocated map, less update and lookup, "
        "3 x 4 x jhash_byte and 4 x spin_lock (2 buckets, free-list pop and push); "
        + seen("htab_triples_prealloc"))
    triple_k = per_op("htab_triples_kmalloc")
    mem_cache = (triple_k - triple_p + 2 * spin) / 2
    put("alloc.bpf_mem_cache", mem_cache,
        "((update, lookup, delete) on a BPF_F_NO_PREALLOC map - on a preallocated one + 2 x "
        "spin_lock of the free list) / 2 (one unit_alloc, one unit_free); "
        + seen("htab_triples_kmalloc"))
    fill = per_op("lru_fill_64", helper) - 4 * jhash - 2 * spin
    put("ops.htab_lru_map_update_elem", fill,
        "per random-key update of 64 into an empty 8192-entry LRU map (64 runs), less "
        "helper_call (get_prandom_u32), 4 x jhash_byte, 2 x spin_lock (bucket, LRU list); "
        + seen("lru_fill_64"))
    put("ops.bpf_lru_evict",
        per_op("lru_evict_64", helper) - per_op("lru_fill_64", helper) - spin,
        "per update into a full 1000-entry LRU map (each evicts one node) - per update into "
        "an empty one, less the spin_lock of the evicted node's bucket; "
        + seen("lru_evict_64"))
    put("ops.trie_lookup_elem", per_op("trie_lookup_32"),
        f"per lookup of 32 in a 513-prefix trie; {seen('trie_lookup_32')}")

    put("cpu.syscall_entry", med["syscall_getppid"],
        f"native getppid loop through glibc syscall(); {seen('syscall_getppid')}")
    put("cpu.syscall_connect", med["syscall_connect"],
        f"native connect(-1, sockaddr_in6, 28) loop; {seen('syscall_connect')}")
    put("cpu.tracepoint_entry",
        med["tracepoint_getppid"] - med["syscall_getppid"] - 2 * insn,
        "getppid loop with a 2-instruction program on sys_enter_getppid - without; "
        + seen("tracepoint_getppid"))
    put("cpu.probe_read_user", med["probe_read_user_connect"] - med["tracepoint_connect"]
        - (executed(READ_SOCKADDR) - executed(RET)) * insn,
        "connect loop with a program reading 16 bytes of the sockaddr with "
        "bpf_probe_read_user - with an empty program, less the extra instructions; "
        + seen("probe_read_user_connect"))
    put("cpu.irq_work", 2 * med["syscall_getppid"],
        "estimate: a self-IPI's interrupt entry and exit, taken as 2 x syscall_entry (not "
        "measurable from user space)")

    # Latencies are idle latencies: other tenants' traffic in the shared cache and memory
    # only adds to a round, so the least disturbed round is the estimate.
    idle = {name: min(samples[name].values) for name in ("chase_llc", "chase_dram",
                                                         "chase_remote") if name in samples}
    put("memory.shared_hit", idle["chase_llc"], f"pointer chase over {host['shared_kib'] // 8} "
        f"KiB, the least disturbed round; {seen('chase_llc')}")
    put("memory.dram_local", idle["chase_dram"], f"pointer chase over "
        f"{CHASE_DRAM_BYTES >> 20} MiB, the least disturbed round; {seen('chase_dram')}")
    if "chase_remote" in idle:
        put("memory.dram_remote", idle["chase_remote"], "pointer chase over "
            f"{CHASE_DRAM_BYTES >> 20} MiB first touched on another node, the least disturbed "
            f"round; {seen('chase_remote')}")
    else:
        put("memory.dram_remote", idle["chase_dram"],
            "this host has one NUMA node: no remote memory, so equal to dram_local")
    same = samples.get("transfer_same_node")
    if same:
        put("memory.transfer_local", min(same.values), "line bounced between two CPUs of the "
            "node (ping-pong, wall time per one-way transfer), the least disturbed round: a "
            f"bounce needs both CPUs running; {same.describe()}")
    else:
        put("memory.transfer_local", 2 * med["chase_llc"],
            "estimate (no second CPU on the node to measure with): 2 x shared_hit")
    other = samples.get("transfer_other_node")
    if other:
        put("memory.transfer_remote", min(other.values), "line bounced between CPUs of two "
            f"nodes, the least disturbed round; {other.describe()}")
    else:
        put("memory.transfer_remote", values["memory.transfer_local"].value,
            "this host has one NUMA node: equal to transfer_local")

    _keep_levels_ordered(values, ("shared_hit", "dram_local", "dram_remote"))
    _keep_levels_ordered(values, ("transfer_local", "transfer_remote"))

    slab = SLAB_FASTPATH_CYCLES / ghz
    for key in ("kmalloc", "kfree"):
        cite(f"alloc.{key}", slab,
             f"estimate: {SLAB_FASTPATH_CYCLES} cycles at {ghz:.2f} GHz, half of the ~45-50 "
             "cycles Jesper Dangaard Brouer measured for a SLUB kmem_cache_alloc + free pair "
             "on the fast path (slab bulk-API series, Linux 4.3-4.4, 2015)")
    cite("alloc.memcg_charge", MEMCG_CHARGE_CYCLES / ghz,
         f"estimate: {MEMCG_CHARGE_CYCLES} cycles at {ghz:.2f} GHz: the slab fast path's "
         f"{SLAB_FASTPATH_CYCLES} x {MEMCG_CHARGE_SHARE:.2f} / {KMEM_CACHE_ALLOC_SHARE}, "
         "the share of the memcg charge functions "
         "(__get_obj_cgroup_from_memcg, memcg_slab_post_alloc_hook, obj_cgroup_charge, "
         f"mod_objcg_state) over kmem_cache_alloc_node's in {MEMCG_PROFILE}")
    cite("alloc.memcg_uncharge", MEMCG_UNCHARGE_CYCLES / ghz,
         f"estimate: {MEMCG_UNCHARGE_CYCLES} cycles at {ghz:.2f} GHz: the slab fast path's "
         f"{SLAB_FASTPATH_CYCLES} x {MEMCG_UNCHARGE_SHARE:.2f} / {KMEM_CACHE_ALLOC_SHARE}, "
         "the free side's mirror of obj_cgroup_charge "
         f"and mod_objcg_state (refill_obj_stock, mod_objcg_state) in {MEMCG_PROFILE}")
    cite("alloc.slab_refill", SLAB_REFILL_CYCLES / ghz,
         f"estimate: {SLAB_REFILL_CYCLES} cycles at {ghz:.2f} GHz: ___slab_alloc's checks and "
         "taking a slab off the partial list, about 60 instructions (its cmpxchg on the "
         "struct slab is charged as cpu.atomic)")
    cite("alloc.slab_free_remote", SLAB_FREE_REMOTE_CYCLES / ghz,
         f"estimate: {SLAB_FREE_REMOTE_CYCLES} cycles at {ghz:.2f} GHz: __slab_free's loop "
         "beyond its cmpxchg_double (charged as cpu.atomic), about 30 instructions")
    for key in ("page_alloc", "page_free"):
        cite(f"alloc.{key}", PAGE_ALLOC_CYCLES / ghz,
             f"estimate: {PAGE_ALLOC_CYCLES} cycles at {ghz:.2f} GHz, half of the ~270 "
             "cycles Jesper Dangaard Brouer measured for an order-0 alloc_pages + "
             "__free_pages pair through the per-CPU lists (page_bench, 2016)")
    put("alloc.call_rcu", mem_cache,
        "estimate: __call_rcu_common's fast path is interrupts off, one per-CPU list push "
        "(rcu_segcblist_enqueue), interrupts on: the same work as bpf_mem_cache")
    put("alloc.rcu_callback", helper + mem_cache,
        "estimate: rcu_do_batch per callback dequeues one entry and makes one indirect "
        "call: helper_call + bpf_mem_cache")
    put("alloc.rcu_core", spin + 2 * mem_cache + helper,
        "estimate: rcu_core's round takes the leaf rcu_node lock (spin_lock), takes the ready "
        "callbacks off the per-CPU list and puts back the rest with interrupts off (2 x "
        "bpf_mem_cache), and the softirq vector is one indirect call (helper_call)")
    for path, value in cycle_estimates(ghz).items():
        cite(path, value.value, value.source)
    hz = host["config_hz"]
    gp_hz = hz or 250
    cite("rcu.grace_period", TICKS_PER_GRACE_PERIOD * 1e9 / gp_hz,
         f"estimate: {TICKS_PER_GRACE_PERIOD} ticks at CONFIG_HZ={gp_hz} "
         f"({'from /proc/config.gz' if hz else 'assumed: /proc/config.gz not readable'}): "
         "one for every busy CPU to report a quiescent state at its tick from user mode, one "
         "for the grace-period kthread (kernel/rcu/tree.c jiffies_till_first_fqs)")

    cite("rcu.tick", 1e9 / gp_hz,
         f"1 / CONFIG_HZ, CONFIG_HZ={gp_hz} "
         f"({'from /proc/config.gz' if hz else 'assumed: /proc/config.gz not readable'})")

    sysfs = f"{where}: sysfs"
    cite("topology.cpus", host["cpus"], f"{sysfs} (/sys/devices/system/cpu/possible)")
    cite("topology.nodes", host["nodes"], f"{sysfs} (/sys/devices/system/node)")
    cite("topology.distances", host["distances"], f"{sysfs} (node*/distance)")
    cite("memory.line_bytes", host["line_bytes"], f"{sysfs} (cache/index*/coherency_line_size)")
    cite("memory.private_kib", host["private_kib"], f"{sysfs} (L2 cache/index*/size)")
    cite("memory.shared_kib", host["shared_kib"], f"{sysfs} (last-level cache/index*/size)")

    reference = {name: Value(round(s.median, 1), f"{where}: map_perf_test {name[9:]} on one "
                             f"CPU, ns of the thread's CPU time per event; {s.describe()}")
                 for name, s in samples.items() if name.startswith("map_perf_")}
    return values, reference


def _executed_of(name: str) -> int:
    """Instructions the probe program executes (built against placeholder map fds)."""
    probe = next(p for p in TEST_RUN_PROBES if p.name == name)
    items, _ = probe.build(_NoMaps())
    return executed(items)


class _NoMaps:
    """Stands in for a System when only a probe's instruction count is wanted."""

    def map_create(self, *args, **kwargs) -> int:
        return 0

    def map_update_elem(self, *args, **kwargs) -> None:
        return None


def summary(samples: dict[str, Samples], profile: Profile) -> str:
    rows = [[name, f"{s.median:.2f}", s.unit, f"{min(s.values):.2f}-{max(s.values):.2f}"]
            for name, s in samples.items()]
    out = ["measurements (medians over interleaved rounds)",
           report.format_table(["probe", "median", "unit", "spread"], rows), "",
           f"profile {profile.name!r}: {profile.description}"]
    rows = [[path, v.value] for path, v in profile.values.items()]
    out.append(report.format_table(["value", "ns / count"], rows))
    return "\n".join(out)
