"""Benchmarks: programs that print figures side by side with a reference."""
