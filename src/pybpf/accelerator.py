"""The optional C accelerator ``pybpf._accel``, loaded once for every module that uses it.

``ACCEL`` is the module, or None when it was not built or ``PYBPF_NO_ACCEL`` is set; pybpf
works the same without it (pure-Python twins), only slower.
"""

from __future__ import annotations

import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("PYBPF_NO_ACCEL"):
        return None
    try:
        from . import _accel
    except ImportError:
        return None
    return _accel


ACCEL = _load()


def accelerated() -> bool:
    """True when the C accelerator is in use (built, and PYBPF_NO_ACCEL not set)."""
    return ACCEL is not None
