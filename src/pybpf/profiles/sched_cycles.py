"""The scheduler's costs ([sched] in every profile), in cycles: what a context switch and a
wake-up onto an idle CPU take (emulated/machine/sched.py charges them).

User space can time neither inside the kernel alone, so every profile gives them as the
estimates below at its clock, with what each counts as its source (``net_source`` formats
them as the [net] estimates). Written before any scheduler result was modeled, and never from
a seed's published figures.
"""

from __future__ import annotations

SCHED_CYCLES: dict[str, tuple[int, str]] = {
    "context_switch": (1000, "one switch between two contexts (__schedule's pick_next_task, "
                       "context_switch: switch_mm and switch_to, finish_task_switch) with "
                       "the mitigations: about 1000 cycles, the figure net.kworker_wakeup's "
                       "estimate uses for each of its two switches; the direct cost only "
                       "(caches refilled afterwards are not charged)"),
    "wakeup_latency": (4000, "a task woken onto an idle CPU: the reschedule IPI's delivery, "
                       "the exit from C1 (the state a CPU idle for microseconds is in: "
                       "drivers/idle/intel_idle.c gives C1 an exit_latency of 1 us in "
                       "spr_cstates and 2 us in hsw_cstates, 3000-6000 cycles at 3 GHz) and "
                       "the idle loop's way back into __schedule: about 4000 cycles"),
}
