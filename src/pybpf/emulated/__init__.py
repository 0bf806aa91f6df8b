"""The emulated backend: the BPF map subsystem reimplemented in user space."""
