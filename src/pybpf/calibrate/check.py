"""``pybpf calibrate --check``: the round trip, map_perf_test's tests on the kernel beside
the same tests modeled on a profile calibrated in the same rounds."""

from __future__ import annotations

import argparse

from ..bench import report
from .derive import host_profile
from .measure import MAP_PERF_TESTS, Calibration

CHECK_TOLERANCE = 0.30  # --check: how far a modeled per-event rate may be from the kernel's


def check(calib: Calibration, ns: argparse.Namespace) -> int:
    """The round trip: map_perf_test's tests on the kernel (as calibrate measures them) beside
    the same tests modeled, in ns per event, on a profile calibrated in the same rounds (or on
    ``--profile``, the kernel measured now)."""
    from ..bench import map_perf as mp
    from ..bench.map_perf.config import DEFAULT_MAX_CNT

    if ns.profile is None:
        profile = host_profile(calib.measure(), calib.host)
        what = "a profile calibrated in the same rounds"
    else:
        progress = report.Progress("calibrate --check (kernel)", calib.rounds,
                                   enabled=calib.progress)
        for _ in range(calib.rounds):
            calib.map_perf()
            progress.advance()
        progress.finish()
        profile = ns.profile
        what = f"profile {ns.profile}"
    rows = []
    for value in MAP_PERF_TESTS:
        test = mp.Test(value)
        measured = calib.samples[f"map_perf_{test.name.lower()}"]
        cfg = mp.Config(test_flags=test.bit, num_procs=1, max_cnt=DEFAULT_MAX_CNT,
                        backend="emulated", profile=profile, json=True,
                        progress=calib.progress)
        result = mp.run(cfg).results[0]
        modeled = 1e9 * mp.TESTS[test].per_event / result.rate
        off = modeled / measured.median - 1
        rows.append({"test": test.name, "kernel_ns_per_event": round(measured.median, 1),
                     "kernel_spread": [round(min(measured.values), 1),
                                       round(max(measured.values), 1)],
                     "modeled_ns_per_event": round(modeled, 1), "off": round(off, 4),
                     "within": abs(off) <= CHECK_TOLERANCE})
    ok = all(row["within"] for row in rows)
    if ns.json:
        report.dump_json({"profile": ns.profile, "host": calib.host, "rounds": calib.rounds,
                          "tolerance": CHECK_TOLERANCE, "tests": rows, "ok": ok})
    else:
        print(f"map_perf_test on CPU {calib.cpu}: the kernel here (median of {calib.rounds} "
              f"rounds, by CPU time) and the model on {what}, ns per event")
        print(report.format_table(
            ["test", "kernel", "spread", "modeled", "off", f"within {CHECK_TOLERANCE:.0%}"],
            [[r["test"], r["kernel_ns_per_event"], "-".join(map(str, r["kernel_spread"])),
              r["modeled_ns_per_event"], f"{r['off']:+.1%}", "yes" if r["within"] else "NO"]
             for r in rows]))
    return 0 if ok else 1
