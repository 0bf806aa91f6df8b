# ruff: noqa: E501 -- the profiles' citations are long strings, kept one per value
"""Derive the shipped server profiles (haswell-ep-2s, sapphire-rapids-2s) from the shipped host
profile: their CPU work is the host's, scaled by clock and a cited per-clock ratio, except where
a cited figure of the era exists (syscall and probe entry, atomics, memory); what the host
profile derives from other values is derived the same way, and the receive path's cycle
estimates ([net], profiles/net_cycles.py) are converted at each machine's clock. Every
value's source says which.

    python3 tools/derive_server_profiles.py src/pybpf/profiles

Run it after recalibrating the host profile (pybpf calibrate -o src/pybpf/profiles/host.toml).
No value here was chosen by looking at the seed patches' published results.
"""

import sys

from pybpf.profiles import (
    SCHEMA,
    Profile,
    Value,
    cycle_estimates,
    dump_profile,
    load_profile,
    validate,
)

V = Value
DERIVED = ("cpu.spin_lock", "alloc.kmalloc", "alloc.kfree", "alloc.call_rcu",
           "alloc.rcu_callback", "cpu.irq_work")
HEADER = ("A machine profile for pybpf's timing model. Every value says where it comes from;\n"
          "values derived from the host profile by tools/derive_server_profiles.py.")


def build(H: dict, host_date: str, name: str, desc: str, ghz: float, ghz_src: str, ipc: float,
          ipc_note: str, given: dict, gp_hz: int) -> Profile:
    hghz = H["cpu.clock_ghz"]
    vals = {}
    for p in SCHEMA:
        if p.section in ("cpu", "ops", "alloc") and p.unit == "ns" and p.path not in given \
                and p.path not in DERIVED:
            x = H[p.path] * hghz / ghz * ipc
            vals[p.path] = V(round(x, 3), f"derived: host profile's {p.path} ({H[p.path]} ns on "
                f"the {hghz} GHz AMD EPYC (Zen 3) host, calibrated {host_date}) x {hghz} / {ghz} "
                f"GHz x {ipc} ({ipc_note})")
    vals["cpu.clock_ghz"] = V(ghz, ghz_src)
    for path, v in given.items():
        vals[path] = v(vals) if callable(v) else v
    x = {k: v.value for k, v in vals.items()}
    vals["cpu.spin_lock"] = V(round(x["cpu.atomic"] + 20 / ghz, 3),
        "estimate: atomic + 20 cycles for pushf/cli/popf, as in the host profile")
    vals["alloc.kmalloc"] = V(round(25 / ghz, 3), f"estimate: 25 cycles at {ghz} GHz, half of "
        "the ~45-50 cycles Jesper Dangaard Brouer measured for a SLUB kmem_cache_alloc + free "
        "pair on the fast path (slab bulk-API series, Linux 4.3-4.4, 2015)")
    vals["alloc.kfree"] = vals["alloc.kmalloc"]
    vals["alloc.call_rcu"] = V(x["alloc.bpf_mem_cache"], "estimate: the same work as "
        "alloc.bpf_mem_cache (interrupts off, one per-CPU list push), as in the host profile")
    vals["alloc.rcu_callback"] = V(round(x["cpu.helper_call"] + x["alloc.bpf_mem_cache"], 3),
        "estimate: helper_call + bpf_mem_cache (one dequeue, one indirect call), as in the host "
        "profile")
    vals["cpu.irq_work"] = V(round(2 * x["cpu.syscall_entry"], 3), "estimate: a self-IPI's "
        "interrupt entry and exit, 2 x syscall_entry, as in the host profile")
    vals.update(cycle_estimates(ghz))
    vals["rcu.grace_period"] = V(2 * 1e9 / gp_hz, f"estimate: 2 ticks at CONFIG_HZ={gp_hz} "
        + ("(the RHEL/CentOS 7 kernels of 2017)" if gp_hz == 1000 else "(RHEL 9's kernels)")
        + ": one for every busy CPU to report a quiescent state at its tick from user mode, one "
        "for the grace-period kthread (kernel/rcu/tree.c jiffies_till_first_fqs)")
    return validate(name, desc, vals)


# ---------------- Haswell-EP, 2017 ---------------------------------------------------------
def haswell(H: dict, host_date: str) -> Profile:
    return build(H, host_date,
        "haswell-ep-2s",
        "2 x Intel Xeon E5-2660 v3 (Haswell-EP, 10 cores each, SMT off), a Linux 4.x kernel of 2017 "
        "before the Meltdown/Spectre mitigations: a 2-node, 20-CPU server of the seed 000 era",
        2.9, "Intel ARK, Xeon E5-2660 v3: 2.6 GHz base, 3.3 GHz max turbo; 2.9 GHz taken with 8 to "
        "10 cores busy (between the two)",
        1.48, "Zen 3 does more per cycle than Haswell: the vendors' per-clock claims chained, Zen 3 / "
        "Zen 2 1.19 (AMD, Oct 2020), Zen 2 / Zen+ 1.15 (AMD, 2019), Zen+ / Zen 1.03 (AMD, 2018), Zen / "
        "Broadwell about 1.0 (AMD's Ryzen launch comparison with the Broadwell-E i7-6900K at equal "
        "clock, 2017), Broadwell / Haswell 1.05 (Intel, 2014); kernel code gains less from wider cores, "
        "so this may overstate Haswell's costs",
        {"topology.cpus": V(20, "2 sockets x 10 cores (Intel ARK, E5-2660 v3), SMT off"),
         "topology.nodes": V(2, "one NUMA node per socket (Cluster-on-Die off, the default)"),
         "topology.distances": V([[10, 21], [21, 10]], "the SLIT two-socket Xeon E5 firmware reports "
                                 "(numactl --hardware: 10 local, 21 remote)"),
         "memory.line_bytes": V(64, "Intel 64 and IA-32 Architectures Optimization Reference Manual"),
         "memory.private_kib": V(256, "L2 per core (Intel ARK, Haswell microarchitecture)"),
         "memory.shared_kib": V(25600, "25 MB L3 per socket (Intel ARK, E5-2660 v3)"),
         "memory.shared_hit": V(21.0, "Molka, Hackenberg, Schoene, Nagel, 'Cache Coherence Protocol "
                                "and Memory Performance of the Intel Haswell-EP Architecture', ICPP "
                                "2015 (E5-2680 v3): L3 latency about 21 ns"),
         "memory.dram_local": V(96.0, "Molka et al., ICPP 2015 (Haswell-EP, default source-snoop "
                                "mode): local DRAM latency about 96 ns"),
         "memory.dram_remote": V(146.0, "Molka et al., ICPP 2015 (Haswell-EP, default source-snoop "
                                 "mode): remote DRAM latency about 146 ns"),
         "memory.transfer_local": V(41.0, "John McCalpin on the Intel forum ('Core-to-Core "
                                    "Communication Latency in Skylake/Kaby Lake', 2016): Intel MLC "
                                    "reports 40.3-42.3 ns L2-to-L2 modified intervention on a "
                                    "Broadwell-EP E5-2660 v4, same socket"),
         "memory.transfer_remote": V(120.0, "estimate: Molka et al., ICPP 2015 put a line modified "
                                     "in the other socket's caches between remote L3 and remote DRAM "
                                     "(about 100 to 146 ns); 120 ns taken"),
         "cpu.syscall_entry": V(55.0, "estimate: about 150 cycles for a null syscall's mode switch "
                                "before the 2018 mitigations (Soares and Stumm, 'FlexSC', OSDI 2010: "
                                "getppid on a Core i7) + 10 cycles of glibc's syscall(), at 2.9 GHz"),
         "cpu.syscall_connect": V(round(55.0 * H["cpu.syscall_connect"] / H["cpu.syscall_entry"], 3),
                                  "derived: syscall_entry x the host's connect(-1) / getppid ratio "
                                  f"({H['cpu.syscall_connect']} / {H['cpu.syscall_entry']} ns)"),
         "cpu.tracepoint_entry": V(60.0, "the 2017 sample probed sys_connect with a kprobe: "
                                   "Documentation/kprobes.txt gives 0.06 us for an optimized kprobe "
                                   "hit on x86-64 (Xeon E5410, 2.33 GHz); Haswell's core is faster and "
                                   "trace_call_bpf adds a per-CPU counter and the program array: "
                                   "taken as 60 ns"),
         "cpu.probe_read_user": lambda v: V(round(2 * v["cpu.helper_call"].value, 3),
                                            "estimate: the 2017 sample's bpf_probe_read "
                                            "(probe_kernel_read: __copy_from_user_inatomic with page "
                                            "faults off; no SMAP on Haswell, no speculation barrier) "
                                            "of 16 bytes: 2 x helper_call"),
         "cpu.atomic": V(round(18 / 2.9, 3), "Agner Fog's instruction tables (Haswell): LOCK XADD / "
                         "LOCK CMPXCHG about 18 cycles, at 2.9 GHz"),
         }, 1000)

# ---------------- Sapphire Rapids, current ---------------------------------------------------
def sapphire_rapids(H: dict, host_date: str) -> Profile:
    return build(H, host_date,
        "sapphire-rapids-2s",
        "2 x Intel Xeon Platinum 8480+ (Sapphire Rapids, 56 cores each, SMT off, SNC off), a current "
        "Linux 6.x kernel with its default mitigations: a current 2-node, 112-CPU server",
        3.0, "Intel ARK, Xeon Platinum 8480+: 2.0 GHz base, 3.8 GHz max turbo, 3.0 GHz all-core turbo",
        1.0, "per-clock work of Golden Cove taken equal to Zen 3's: no published per-clock comparison "
        "of kernel code is known to us",
        {"topology.cpus": V(112, "2 sockets x 56 cores (Intel ARK, Platinum 8480+), SMT off"),
         "topology.nodes": V(2, "one NUMA node per socket (sub-NUMA clustering off)"),
         "topology.distances": V([[10, 21], [21, 10]], "the SLIT two-socket Xeon firmware reports "
                                 "(numactl --hardware: 10 local, 21 remote)"),
         "memory.line_bytes": V(64, "Intel 64 and IA-32 Architectures Optimization Reference Manual"),
         "memory.private_kib": V(2048, "2 MB L2 per Golden Cove core (Intel ARK, Sapphire Rapids)"),
         "memory.shared_kib": V(107520, "105 MB L3 per socket (Intel ARK, Platinum 8480+)"),
         "memory.shared_hit": V(33.0, "Chips and Cheese, 'Sapphire Rapids: Golden Cove Hits the "
                                "Server' (2023): L3 latency about 33 ns, as read from the article's "
                                "latency plot"),
         "memory.dram_local": V(108.0, "Chips and Cheese (2023), Sapphire Rapids with DDR5-4800: "
                                "DRAM latency about 108 ns, as read from the article's latency plot"),
         "memory.dram_remote": V(190.0, "estimate: local DRAM + about 80 ns for the UPI crossing and "
                                 "the remote home agent (the remote - local difference of two-socket "
                                 "Xeons, as on Haswell-EP in Molka et al., ICPP 2015, grown with the "
                                 "mesh); no primary measurement at hand"),
         "memory.transfer_local": V(55.0, "estimate: core-to-core latency about 50-60 ns within a "
                                    "Sapphire Rapids socket (Chips and Cheese, 2023, core-to-core "
                                    "latency matrix)"),
         "memory.transfer_remote": V(180.0, "estimate: about 180 ns between sockets (Chips and "
                                     "Cheese, 2023, core-to-core latency matrix of a two-socket "
                                     "system)"),
         "cpu.atomic": V(round(20 / 3.0, 3), "Agner Fog's instruction tables (Alder Lake P-core / "
                         "Golden Cove): LOCK XADD about 20 cycles, at 3.0 GHz"),
         }, 1000)


def main(out: str) -> None:
    host = load_profile("host")
    H = {k: v.value for k, v in host.values.items()}
    host_date = host.description.rsplit("calibrated ", 1)[-1]
    dump_profile(haswell(H, host_date), f"{out}/haswell-ep-2s.toml", header=HEADER)
    dump_profile(sapphire_rapids(H, host_date), f"{out}/sapphire-rapids-2s.toml", header=HEADER)


if __name__ == "__main__":
    main(sys.argv[1])
