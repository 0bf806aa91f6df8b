"""Build hook for the optional C extensions; everything else is in pyproject.toml.

``optional=True``: without a C compiler or Python headers the build skips them and pybpf runs
on its pure-Python path (``pybpf._accel``: the Map layer's accelerator) or without shared
maps (``pybpf._shm_maps``: maps in shared memory, ``pybpf.shared``, which then says what to
install) or with the emulated machine's cache model in Python (``pybpf._cache_model``: the
C twin of ``Timing.access``, ``charge``, ``spin_lock``, ``spin_unlock`` and
``locked_access``, of a hash map's lookup, update and delete, ``HtabCore``, with
bpf_mem_alloc's and the common LRU's hot paths, of an LPM trie's lookup walk, of
bpf_probe_read_user's common case, and of a native-tier program's entry).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("pybpf._accel", ["src/pybpf/_accel.c"],
              depends=["src/pybpf/_helper_gil.h", "src/pybpf/_int_cache.h"],
              optional=True, extra_compile_args=["-O2"]),
    Extension("pybpf._cache_model", ["src/pybpf/_cache_model.c", "src/pybpf/_hashtab.c",
                                    "src/pybpf/_memalloc.c", "src/pybpf/_bpf_lru_list.c",
                                    "src/pybpf/_lpm_trie.c", "src/pybpf/_host_lock.c",
                                    "src/pybpf/_bpf_trace.c", "src/pybpf/_native.c"],
              depends=["src/pybpf/_cache_model.h", "src/pybpf/_jhash.h",
                       "src/pybpf/_pyattr.h", "src/pybpf/_helper_gil.h",
                       "src/pybpf/_int_cache.h"], optional=True,
              # no fused multiply-adds: the modeled clocks are Python's float arithmetic
              extra_compile_args=["-O2", "-Wall", "-ffp-contract=off"]),
    # librt: shm_open before glibc 2.34 (an empty stub after).
    Extension("pybpf._shm_maps", ["src/pybpf/_shm_maps.c"],
              depends=["src/pybpf/_jhash.h", "src/pybpf/_shm_lru.h",
                       "src/pybpf/_shm_lpm.h", "src/pybpf/_pyattr.h",
                       "src/pybpf/_helper_gil.h", "src/pybpf/_int_cache.h"],
              optional=True,
              extra_compile_args=["-O2", "-Wall"], libraries=["rt"]),
])
