"""Build hook for the optional C accelerator; everything else is in pyproject.toml.

``optional=True``: without a C compiler or Python headers the build skips it and pybpf runs
on its pure-Python path.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("pybpf._accel", ["src/pybpf/_accel.c"], optional=True,
                             extra_compile_args=["-O2"])])
