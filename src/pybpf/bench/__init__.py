"""Benchmarks: programs that print figures side by side with a reference.

Each benchmark module has ``configure_parser(parser)``, which adds its arguments, and a function
that runs it on the parsed arguments and returns the exit status; ``cli.BENCHMARKS`` lists them
as ``pybpf bench NAME``. Nothing here imports the command line.
"""
