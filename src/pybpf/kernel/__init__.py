"""The kernel backend: bpf(2) and perf_event_open(2) through ctypes."""
