"""The hot-path core of ``pybpf.maps.Map``: ``m[k]``, ``m[k] = v``, ``del m[k]``, ``k in m``.

``MapCore`` is the C accelerator's ``_accel.MapCore`` when it is built, else ``PyMapCore``,
its pure-Python twin (same results, same errors). ``Map`` sets a core up (``_core_setup``) in
one of three modes from the ``FastOps`` capability its System hands out: ``MODE_KERNEL``
(bpf(2) made in C on ``FastOps.bpf_fd``; the C core only), ``MODE_TABLE`` (reads of the live
``FastOps.table``), ``MODE_SLOW`` (the capability's callables). The modes are mirrored in
_accel.c.
"""

from __future__ import annotations

from .accelerator import ACCEL
from .codecs import KIND_BYTES

MODE_SLOW, MODE_KERNEL, MODE_TABLE = 0, 1, 2


class PyMapCore:
    """Pure-Python twin of ``_accel.MapCore``: the element ops behind ``m[k]`` and friends."""

    def _core_setup(self, mode: int, fd: int, key_size: int, value_size: int, key_kind: int,
                    value_kind: int, key_encode, value_encode, value_decode, table,
                    lookup, update, delete) -> None:
        if mode == MODE_TABLE:
            lookup = _table_lookup(table, lookup)
        self._c_lookup = lookup
        self._c_update = update
        self._c_delete = delete
        self._c_kenc = key_encode
        self._c_venc = value_encode
        self._c_vdec = bytes if value_kind == KIND_BYTES else value_decode

    def __getitem__(self, key):
        return self._c_vdec(self._c_lookup(self._c_kenc(key)))

    def __contains__(self, key) -> bool:
        try:
            self._c_lookup(self._c_kenc(key))
        except KeyError:
            return False
        return True

    def __setitem__(self, key, value) -> None:
        self._c_update(self._c_kenc(key), self._c_venc(value), 0)

    def __delitem__(self, key) -> None:
        self._c_delete(self._c_kenc(key))

    def _update(self, key, value, flags: int) -> None:
        self._c_update(self._c_kenc(key), self._c_venc(value), flags)


def _table_lookup(table: dict, backend_lookup):
    """A lookup that reads ``table``; a missing key goes to the backend, which raises the
    error (no reference to the Map: its fd must close as soon as it is dropped)."""
    get = table.get

    def lookup(key: bytes) -> bytes:
        value = get(key)
        if value is None:
            return backend_lookup(key)
        return bytes(value)

    return lookup


MapCore: type = ACCEL.MapCore if ACCEL is not None else PyMapCore
