"""Loading an ``ObjectSpec`` on a System: libbpf's ``bpf_object__load``, step by step.

0. Kfuncs (libbpf's bpf_object__resolve_externs, for func ksyms): each ``__ksym``
   function the object declares is looked up by its essential name (``bpf_foo___v2`` ->
   ``bpf_foo``) in the System's kernel BTF (``System.kfunc_btf_id``) and its prototype
   checked against the kernel's (bpf_core_types_are_compat). A strong one that is missing
   or incompatible stops the load (ESRCH, EINVAL, naming it); a weak one is left
   unresolved: its ``bpf_ksym_exists`` address loads 0 and its calls are poisoned (a call
   of helper POISON_CALL_KFUNC_BASE + its index), so only a guarded call loads, and a
   reachable one is reported as libbpf does. Only vmlinux kfuncs: those of kernel
   modules need a BTF fd array, which pybpf does not pass.
   Extern variables (libbpf's bpf_object__resolve_externs, ``externs``): the ``__kconfig``
   externs' values are worked out (the System's kernel version and config, the ``kconfig``
   text given to ``load`` first) for the ``.kconfig`` map; ``__ksym`` kernel variables are
   found in the System's kernel BTF (typed) or kallsyms (typeless). A strong one that
   cannot be resolved stops the load as libbpf stops it; a weak one is 0.
1. BTF: the fixed-up BTF goes in with BTF_LOAD. As in libbpf it is optional: when the
   kernel refuses it, a warning says why (with the kernel's log) and loading goes on
   without it (maps untyped, programs without func_info).
2. Maps, in the object's order: a pinned map (``LIBBPF_PIN_BY_NAME``) that already exists
   under ``pin_root_path`` is reused when it matches, else created and pinned (the pin's
   directory made first if missing, as libbpf's make_parent_dir does); maps are
   created with their BTF key/value types (retried without them if the kernel refuses, as
   libbpf does; a PERF_EVENT_ARRAY without max_entries gets a slot per possible CPU);
   global data maps get their initial bytes (``.kconfig``: the values worked out above),
   ``.rodata`` and ``.kconfig`` are then frozen; map-in-map slots
   get their inner maps.
3. Programs (those with ``autoload``): CO-RE relocations against the System's own BTF
   (``System.vmlinux_btf``), map fds into their loads, kfunc calls made
   ``BPF_PSEUDO_KFUNC_CALL`` (imm: the BTF id, off 0: vmlinux) and kfunc addresses
   ``BPF_PSEUDO_BTF_ID`` loads, typed ksyms ``BPF_PSEUDO_BTF_ID`` loads of their VAR and
   typeless ones (and missing weak ones) constants, BPF_PROG_LOAD with the license,
   kernel version, BTF, func_info and line_info; the target's BTF id for tracing programs.
   A refusal reads like libbpf's: the program, the verifier's log, and for an instruction a
   CO-RE relocation could not resolve, which relocation it was.
4. Program-array slots get their programs.

An ``Object`` owns what it made: closing it (or leaving its ``with`` block) detaches its
links and closes its programs, maps and BTF; pinned maps stay pinned.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import struct
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from ..btf import Btf, Func, Typedef
from ..errors import BPFError, VerifierError, strerror
from ..handles import Closable
from ..maps import Map, MapSpec, resolve_system
from ..programs import Link, Program, ProgramSpec
from ..system import System
from ..uapi import (
    BPF_PSEUDO_BTF_ID,
    BPF_PSEUDO_KFUNC_CALL,
    AttachType,
    MapType,
    ProgType,
    map_traits,
)
from .errors import ObjectError, UnsupportedError
from .externs import KCONFIG_SEC, ResolvedKsym, patch_ksym, resolve_kconfig, resolve_ksyms
from .linker import RelocKind
from .map_defs import LIBBPF_PIN_BY_NAME, Globals, MapsByName, ObjectMap
from .relo_core import POISON_IMM, Poisoned, apply_core_relos, essential_name, types_are_compat
from .section_defs import SecFlag, SectionDef

_INSN = struct.Struct("<BBhi")
_NO_SEC_DEF = SectionDef("", ProgType.UNSPEC)
_KEY0 = bytes(4)
DEFAULT_PIN_ROOT = "/sys/fs/bpf"
_NO_BTF_TYPES = frozenset({MapType.PERF_EVENT_ARRAY, MapType.CGROUP_ARRAY, MapType.STACK_TRACE,
                           MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS, MapType.DEVMAP,
                           MapType.DEVMAP_HASH, MapType.CPUMAP, MapType.XSKMAP,
                           MapType.SOCKMAP, MapType.SOCKHASH, MapType.QUEUE, MapType.STACK,
                           MapType.ARENA})
# libbpf: an unresolved weak kfunc's calls become calls of helper BASE + the extern's index,
# which the verifier refuses as "invalid func unknown#..." only where they are reachable.
POISON_CALL_KFUNC_BASE = 2002000000
# Where a BTF-attached program's target lives in vmlinux BTF: prefix of the type's name.
_BTF_TARGET_PREFIX = {AttachType.TRACE_RAW_TP: "btf_trace_", AttachType.LSM_MAC: "bpf_lsm_",
                      AttachType.TRACE_ITER: "bpf_iter_"}


def check_loadable(spec: Any, program: Any) -> None:
    """Raise ``UnsupportedError`` naming what pybpf cannot load in ``program``, or an
    ``ObjectError`` when its section names no program type."""
    problems = spec.unsupported + program.unsupported
    if problems:
        raise UnsupportedError(f"prog '{program.name}': unsupported: {'; '.join(problems)}")
    if program.prog_type == ProgType.UNSPEC:
        raise ObjectError(f"prog '{program.name}': missing BPF prog type, check ELF section "
                          f"name '{program.section}'")


class Object(Closable):
    """A loaded BPF object (libbpf's ``bpf_object`` after load, cilium's ``Collection``).

    ``maps`` and ``programs`` are by name (global data maps by libbpf's names,
    ``<obj>.data``, and found by their sections too: ``maps[".data"]``);
    ``globals`` reads and writes global variables in the live maps; ``kfuncs`` gives each
    kfunc extern's BTF id in the System's kernel BTF (None: weak, left unresolved).
    """

    def __init__(self, spec: Any, system: System) -> None:
        self.spec = spec
        self.system = system
        self.maps: MapsByName[Map] = MapsByName(sections=spec.maps.sections)
        self.programs: dict[str, Program] = {}
        self.links: list[Link] = []
        self.btf_fd: int | None = None
        # Each kfunc extern's BTF id in the System's kernel BTF; None: weak and unresolved.
        self.kfuncs: dict[str, int | None] = {}
        # Maps this load found pinned and reused (their contents are left alone), and the
        # paths it pinned (unpinned again if the load fails)
        self.reused: set[str] = set()
        self.pinned: list[str] = []
        # Where each ksym variable resolved (a weak one not found is absent).
        self.ksyms: dict[str, ResolvedKsym] = {}
        # Initial values the loader worked out for internal maps (``.kconfig``), by map.
        self.initial_data: dict[str, bytes] = {}
        self.globals = Globals(spec.maps, self._read_value, self._write_value)

    def _read_value(self, name: str) -> bytes:
        return self.system.map_lookup_elem(self.maps[name].fd, _KEY0)

    def _write_value(self, name: str, data: bytes) -> None:
        self.system.map_update_elem(self.maps[name].fd, _KEY0, data)

    # -- attaching -----------------------------------------------------------------------
    def attach(self) -> list[Link]:
        """Attach every loaded program that libbpf auto-attaches by its section (tracepoints,
        raw tracepoints); the new links. XDP programs need a device: ``attach_program``."""
        return [self.attach_program(name) for name in self.programs
                if (self.spec.programs[name].sec_def or _NO_SEC_DEF).attach in ("tp", "raw_tp")]

    def attach_program(self, name: str, *, ifindex: int | None = None) -> Link:
        """Attach program ``name`` as its section says (``tracepoint/<cat>/<name>``,
        ``raw_tp/<name>``, ``xdp`` to ``ifindex``); the link is also kept by the object."""
        prog_spec = self.spec.programs[name]
        program = self.programs[name]
        target = prog_spec.attach_target
        kind = prog_spec.sec_def.attach if prog_spec.sec_def else None
        if kind == "tp":
            category, _, event = target.partition("/")
            if not event:
                raise ObjectError(f"prog '{name}': section '{prog_spec.section}' names no "
                                  "tracepoint: use SEC(\"tracepoint/<category>/<name>\")")
            link = program.attach_tracepoint(category, event)
        elif kind == "raw_tp":
            if not target:
                raise ObjectError(f"prog '{name}': section '{prog_spec.section}' names no "
                                  "raw tracepoint: use SEC(\"raw_tp/<name>\")")
            link = Link(self.system, self.system.raw_tracepoint_open(program.fd, target),
                        program)
        elif prog_spec.prog_type == ProgType.XDP:
            if ifindex is None:
                raise ObjectError(f"prog '{name}': an XDP program attaches to a network "
                                  "device: pass ifindex=")
            link = Link(self.system, self.system.link_create(program.fd, ifindex,
                                                             AttachType.XDP), program)
        else:
            raise UnsupportedError(f"prog '{name}': section '{prog_spec.section}' is not "
                                   "auto-attachable (pybpf attaches tracepoint, raw_tp and "
                                   "xdp programs)")
        self.links.append(link)
        return link

    # -- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """Detach the links, close the programs, maps and BTF (idempotent)."""
        for obj in [*self.links, *self.programs.values(), *self.maps.values()]:
            obj.close()
        self.links.clear()
        if self.btf_fd is not None:
            self.system.close(self.btf_fd)
            self.btf_fd = None

    def __repr__(self) -> str:
        return (f"<Object {self.spec.name!r} on {self.system.name}: maps "
                f"{', '.join(self.maps) or '-'}; programs {', '.join(self.programs) or '-'}>")


def load_object(spec: Any, system: System | None = None, *,
                pin_root_path: str = DEFAULT_PIN_ROOT, log_level: int = 0,
                kconfig: str | None = None) -> Object:
    """Load ``spec`` (an ``ObjectSpec``) on ``system`` (default: ``pybpf.system()``);
    ``kconfig``: kernel config lines read before the System's (see ``ObjectSpec.load``)."""
    system = resolve_system(system)
    if spec.byteorder != ("little" if struct.pack("=H", 1)[0] else "big"):
        raise ObjectError(f"object '{spec.name}' is {spec.byteorder}-endian; this machine "
                          "is not: compile it with -target bpf for this host")
    obj = Object(spec, system)
    try:
        target_btf = None
        if spec.kfuncs or any(ext.type_id for ext in spec.ksyms.values()) or \
                any(p.core_relos for p in spec.programs.values() if p.autoload):
            target_btf = Btf.from_bytes(system.vmlinux_btf())
        if spec.kconfig:
            obj.initial_data[spec.maps[KCONFIG_SEC].name] = resolve_kconfig(spec.kconfig,
                                                                            system, kconfig)
        if spec.ksyms:
            obj.ksyms = resolve_ksyms(spec.ksyms, spec.btf, system, target_btf)
        if spec.kfuncs:
            obj.kfuncs = resolve_kfuncs(spec, system, target_btf)
        _load_btf(obj)
        for object_map in spec.maps.values():
            obj.maps[object_map.name] = _create_map(obj, object_map, pin_root_path)
        for object_map in spec.maps.values():
            _fill_map(obj, object_map, programs=False)
        for name, prog in spec.programs.items():
            if not prog.autoload:
                continue
            check_loadable(spec, prog)
            obj.programs[name] = _load_program(obj, prog, target_btf, log_level)
        for object_map in spec.maps.values():
            _fill_map(obj, object_map, programs=True)
    except BaseException:
        obj.close()
        for path in obj.pinned:  # as libbpf's bpf_object_load unpins what it pinned
            _unpin(system, path)
        raise
    return obj


def _unpin(system: System, path: str) -> None:
    """unlink(2) of a pin this load made."""
    try:
        system.obj_unpin(path)
    except BPFError as exc:
        warnings.warn(f"couldn't unpin '{path}' after the failed load: {exc}", RuntimeWarning,
                      stacklevel=3)


def resolve_kfuncs(spec: Any, system: System, kernel_btf: Btf) -> dict[str, int | None]:
    """bpf_object__resolve_ksym_func_btf_id() for each kfunc extern of ``spec``: its BTF id
    in ``system``'s kernel BTF (``kernel_btf``, the same BTF parsed), or None for a weak one
    the kernel lacks or declares with another prototype."""
    ids: dict[str, int | None] = {}
    for ext in spec.kfuncs.values():
        where = f"extern (func ksym) '{ext.name}'"
        try:
            kfunc_id = system.kfunc_btf_id(essential_name(ext.name))
        except BPFError as exc:
            if exc.errno != errno.ENOENT:
                raise
            if ext.weak:
                ids[ext.name] = None
                continue
            raise BPFError(errno.ESRCH, f"{where}: not found in the {system.name} backend's "
                           f"kernel BTF (vmlinux; module BTFs are not searched): "
                           f"{exc.detail}", command="kfunc_btf_id", detail=exc.detail,
                           hint="declare it __weak and guard its calls with "
                                "bpf_ksym_exists() to load without it; a kernel module's "
                                "kfuncs need a BTF fd array, which pybpf does not pass") \
                from None
        kernel_proto = kernel_btf[kfunc_id].type_id
        if not types_are_compat(spec.btf, ext.proto_id, kernel_btf, kernel_proto):
            if ext.weak:
                ids[ext.name] = None
                continue
            raise BPFError(errno.EINVAL, f"{where}: func_proto [{ext.proto_id}] incompatible "
                           f"with vmlinux [{kernel_proto}]", command="kfunc_btf_id",
                           detail=_proto_mismatch(len(spec.btf[ext.proto_id].params),
                                                  len(kernel_btf[kernel_proto].params)),
                           hint="declare the kfunc as the kernel's BTF does "
                                "(bpftool btf dump file /sys/kernel/btf/vmlinux format c)")
        ids[ext.name] = kfunc_id
    return ids


def _proto_mismatch(local_params: int, kernel_params: int) -> str:
    """What differs between two prototypes bpf_core_types_are_compat() refused."""
    if local_params == kernel_params:
        return (f"both take {kernel_params} parameters; the return type or a parameter's "
                "differs in kind (integer, pointer, struct, ...)")
    return (f"the object declares {local_params} parameter{'s' * (local_params != 1)}, the "
            f"kernel {kernel_params}")


def _load_btf(obj: Object) -> None:
    btf = obj.spec.btf
    if btf is None:
        return
    try:
        obj.btf_fd = obj.system.btf_load(btf.to_bytes())
    except BPFError as exc:
        log = getattr(exc, "log", "")
        warnings.warn(f"object '{obj.spec.name}': error loading .BTF into the kernel: "
                      f"{exc.strerror}; BTF is optional, ignoring" +
                      (f"\n-- BEGIN BTF LOAD LOG --\n{log.rstrip()}\n-- END BTF LOAD LOG --"
                       if log else ""), RuntimeWarning, stacklevel=4)


def _create_map(obj: Object, m: ObjectMap, pin_root: str) -> Map:
    system, spec = obj.system, _sized(m.spec, obj.system)
    path = os.path.join(pin_root, m.name) if m.pinning == LIBBPF_PIN_BY_NAME else None
    if path is not None:
        existing = _reuse_pinned(obj, m, spec, path)
        if existing is not None:
            obj.reused.add(m.name)
            return existing
    template = None
    try:
        if isinstance(spec.inner_map, MapSpec):  # the inner template, typed as libbpf makes it
            template = _create_typed(obj, m, f"{m.name}.inner",
                                     _sized(spec.inner_map, system),
                                     m.inner_key_type_id, m.inner_value_type_id)
            spec = dataclasses.replace(spec, inner_map=template)
        created = _create_typed(obj, m, m.name, spec, m.key_type_id, m.value_type_id)
    except BPFError as exc:
        raise _map_error(m, "failed to create", exc) from exc
    finally:
        if template is not None:  # the map of maps keeps what it needs of it
            template.close()
    if path is not None:
        try:
            _make_parent_dir(system, path)
            created.pin(path)
        except BPFError as exc:
            created.close()
            raise _map_error(m, f"failed to pin at '{path}'", exc) from exc
        obj.pinned.append(path)
    return created


def _make_parent_dir(system: System, path: str) -> None:
    """libbpf's make_parent_dir(): the pin's directory, made (0700) if missing; only that
    one: a missing directory above it is ENOENT."""
    try:
        system.mkdir(os.path.dirname(path), 0o700)
    except BPFError as exc:
        if exc.errno != errno.EEXIST:
            raise


def _sized(spec: MapSpec, system: System) -> MapSpec:
    """libbpf's map_set_def_max_entries(): a PERF_EVENT_ARRAY without max_entries gets a
    slot per possible CPU (an inner template too)."""
    if spec.type == MapType.PERF_EVENT_ARRAY and not spec.max_entries:
        return dataclasses.replace(spec, max_entries=system.num_possible_cpus)
    return spec


def _create_typed(obj: Object, m: ObjectMap, name: str, spec: MapSpec, key_type_id: int,
                  value_type_id: int) -> Map:
    """bpf_object__create_map: with the object's BTF types where the type takes them,
    again without them if the kernel refuses them (as libbpf retries)."""
    typed = obj.btf_fd is not None and value_type_id and _takes_btf(spec)
    if not typed:
        return Map.create(spec, obj.system)
    try:
        return Map.create(spec, obj.system, btf=(obj.btf_fd, key_type_id, value_type_id))
    except BPFError as exc:
        warnings.warn(f"map '{name}': creating it with BTF types failed ({exc.strerror}); "
                      "retrying without BTF", RuntimeWarning, stacklevel=5)
        return Map.create(spec, obj.system)


def _takes_btf(spec: MapSpec) -> bool:
    """libbpf creates these map types without BTF types (bpf_object__create_map)."""
    return spec.type not in _NO_BTF_TYPES


def _reuse_pinned(obj: Object, m: ObjectMap, want: MapSpec, path: str) -> Map | None:
    system = obj.system
    try:
        fd = system.obj_get(path)
    except BPFError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise _map_error(m, f"couldn't open the pinned map at '{path}'", exc) from exc
    existing = Map.from_fd(fd, system, key=want.key, value=want.value)
    info = existing.info()
    if (info.type, info.key_size, info.value_size, info.max_entries, info.map_flags,
            info.map_extra) != (want.type, want.key_size, want.value_size, want.max_entries,
                                want.map_flags, want.map_extra):
        existing.close()
        raise ObjectError(f"map '{m.name}': couldn't reuse pinned map at '{path}': parameter "
                          "mismatch (type, key/value size, max_entries, flags or map_extra "
                          "differ)")
    return existing


def _fill_map(obj: Object, m: ObjectMap, *, programs: bool) -> None:
    """Initial contents: data bytes (then .rodata frozen) and inner maps, or, once programs
    are loaded, program-array slots. A reused pinned map keeps what it holds, its
    program-array slots aside (libbpf fills those in every load)."""
    live = obj.maps[m.name]
    prog_array = map_traits(m.spec.type).fd_values and not map_traits(m.spec.type).map_in_map
    if m.name in obj.reused and not (programs and prog_array):
        return
    try:
        if not programs and m.data is not None:
            obj.system.map_update_elem(live.fd, _KEY0,
                                       obj.initial_data.get(m.name, bytes(m.data)))
            if m.frozen:
                live.freeze()
        for slot, target in m.slots.items():
            if prog_array != programs:
                continue
            source = obj.programs.get(target) if prog_array else obj.maps.get(target)
            if source is None:  # libbpf stores the unloaded program's fd, which fails
                raise ObjectError(f"map '{m.name}': failed to initialize slot [{slot}] to "
                                  f"prog '{target}': it is not loaded (autoload is off: "
                                  "turn it on, or leave it out of the initializer)")
            obj.system.map_update_elem(live.fd, slot.to_bytes(4, "little"),
                                       source.fd.to_bytes(4, "little"))
    except BPFError as exc:
        raise _map_error(m, "failed to initialize", exc) from exc


def _map_error(m: ObjectMap, what: str, exc: BPFError) -> BPFError:
    """``exc`` again, its message saying which map, as libbpf's warnings do."""
    return type(exc)(exc.errno, f"map '{m.name}': {what}: {exc}", command=exc.command,
                     map=exc.map, hint=exc.hint, detail=exc.detail)


def program_code(prog: Any, map_fds: Mapping[str, int], local_btf: Btf | None = None,
                 target_btf: Btf | None = None,
                 kfunc_ids: Mapping[str, int | None] | None = None,
                 ksyms: Mapping[str, ResolvedKsym] | None = None
                 ) -> tuple[bytes, list[Poisoned]]:
    """A program's instructions ready for BPF_PROG_LOAD: CO-RE relocated (``local_btf``
    against ``target_btf``), with the fds of the maps it uses (``map_fds`` by name), the
    kfuncs' BTF ids (``kfunc_ids``, what ``resolve_kfuncs`` gives) and the kernel
    variables' (``ksyms``, what ``resolve_ksyms`` gives; a weak one absent loads 0); the
    CO-RE relocations that found no target come back with it."""
    code = bytearray(prog.insns)
    poisoned: list[Poisoned] = []
    if prog.core_relos:
        if local_btf is None or target_btf is None:
            raise ObjectError(f"prog '{prog.name}': CO-RE relocations need the object's BTF "
                              "and a target BTF")
        patched, poisoned = apply_core_relos(bytes(code), prog.core_relos, local_btf,
                                             target_btf, prog.name)
        code[:] = patched
    for relo in prog.relocations:
        if relo.kind in (RelocKind.MAP_FD, RelocKind.MAP_VALUE):
            if relo.target not in map_fds:
                raise ObjectError(f"prog '{prog.name}': insn #{relo.insn} uses map "
                                  f"'{relo.target}', which has no fd")
            opcode, regs, off, _imm = _INSN.unpack_from(code, relo.insn * 8)
            _INSN.pack_into(code, relo.insn * 8, opcode, regs, off, map_fds[relo.target])
        elif relo.kind in (RelocKind.KFUNC_CALL, RelocKind.KFUNC_ADDR):
            _patch_kfunc(code, prog.name, relo, kfunc_ids or {})
        elif relo.kind == RelocKind.KSYM:
            patch_ksym(code, relo.insn, (ksyms or {}).get(relo.target))
    return bytes(code), poisoned


def _patch_kfunc(code: bytearray, prog: str, relo: Any,
                 kfunc_ids: Mapping[str, int | None]) -> None:
    """bpf_object__relocate_data(), RELO_EXTERN_CALL and RELO_EXTERN_LD64 of a func ksym."""
    if relo.target not in kfunc_ids:
        raise ObjectError(f"prog '{prog}': insn #{relo.insn} uses kfunc '{relo.target}', "
                          "which was not resolved (resolve_kfuncs)")
    kfunc_id = kfunc_ids[relo.target]
    pos = relo.insn * 8
    opcode, regs, _off, _imm = _INSN.unpack_from(code, pos)
    if relo.kind == RelocKind.KFUNC_CALL:
        if kfunc_id is None:  # poison_kfunc_call(): an invalid helper call if reachable
            index = list(kfunc_ids).index(relo.target)
            _INSN.pack_into(code, pos, opcode, 0, 0, POISON_CALL_KFUNC_BASE + index)
        else:  # off 0: the kfunc is in vmlinux, not in a module's BTF (fd_array index)
            _INSN.pack_into(code, pos, opcode, BPF_PSEUDO_KFUNC_CALL << 4, 0, kfunc_id)
        return
    hi = _INSN.unpack_from(code, pos + 8)
    if kfunc_id is None:  # bpf_ksym_exists() of a missing weak kfunc: the constant 0
        _INSN.pack_into(code, pos, opcode, regs & 0xF, 0, 0)
    else:  # the kfunc's address: a BTF id load, of vmlinux (btf obj fd 0)
        _INSN.pack_into(code, pos, opcode, BPF_PSEUDO_BTF_ID << 4 | regs & 0xF, 0, kfunc_id)
    _INSN.pack_into(code, pos + 8, hi[0], hi[1], hi[2], 0)


def _load_program(obj: Object, prog: Any, target_btf: Btf | None, log_level: int) -> Program:
    system, spec = obj.system, obj.spec
    map_fds = MapsByName({name: m.fd for name, m in obj.maps.items()},
                         sections=obj.maps.sections)
    code, poisoned = program_code(prog, map_fds,
                                  spec.btf, target_btf, obj.kfuncs, obj.ksyms)
    btf_args: dict[str, Any] = {}
    if obj.btf_fd is not None and prog.func_info:
        btf_args = dict(
            prog_btf_fd=obj.btf_fd,
            func_info=b"".join(struct.pack("=II", i, rec.type_id) for i, rec in prog.func_info),
            line_info=b"".join(struct.pack("=IIII", i, rec.file_name_off, rec.line_off,
                                           rec.line_col) for i, rec in prog.line_info))
    attach_btf_id = _attach_btf_id(obj, prog) if prog.sec_def is not None and \
        prog.sec_def.flags & SecFlag.ATTACH_BTF else 0
    program_spec = ProgramSpec(prog.prog_type, bytes(code), license=prog.license,
                               expected_attach_type=prog.expected_attach_type,
                               name=prog.name[:15], prog_flags=prog.prog_flags)
    try:
        fd = system.prog_load(int(prog.prog_type), bytes(code), license=prog.license,
                              expected_attach_type=prog.expected_attach_type,
                              prog_name=prog.name[:15], prog_flags=prog.prog_flags,
                              log_level=log_level, kern_version=prog.kern_version,
                              attach_btf_id=attach_btf_id, **btf_args)
    except VerifierError as exc:
        raise _load_error(prog, exc, poisoned, obj.kfuncs) from None
    except BPFError as exc:
        raise type(exc)(exc.errno, f"prog '{prog.name}': BPF program load failed: {exc}",
                        command=exc.command, map=exc.map, detail=exc.detail,
                        hint=exc.hint) from None
    return Program(system, fd, program_spec, [obj.maps[n] for n in prog.maps])


def _attach_btf_id(obj: Object, prog: Any) -> int:
    """The vmlinux BTF id of a tracing program's target (libbpf_find_attach_btf_id)."""
    target = prog.attach_target
    if not target:
        raise ObjectError(f"prog '{prog.name}': no BTF-based attach target is specified: "
                          f"use SEC(\"{prog.section}/<target>\")")
    vmlinux = Btf.from_bytes(obj.system.vmlinux_btf())
    prefix = _BTF_TARGET_PREFIX.get(prog.expected_attach_type, "")
    kind = Typedef if prog.expected_attach_type == AttachType.TRACE_RAW_TP else Func
    for type_id in vmlinux.ids_named(prefix + target):
        if isinstance(vmlinux[type_id], kind):
            return type_id
    raise ObjectError(f"prog '{prog.name}': failed to find kernel BTF type ID of "
                      f"'{target}': no {kind.kind.name} '{prefix + target}' in the "
                      f"{obj.system.name} backend's BTF")


def _load_error(prog: Any, exc: VerifierError, poisoned: Iterable[Poisoned],
                kfunc_ids: Mapping[str, int | None]) -> VerifierError:
    """libbpf's report: the program and the errno (the log follows, as VerifierError prints
    it); a poisoned CO-RE instruction or call of an unresolved weak kfunc that the verifier
    reached is explained (libbpf's fixup_log_failed_core_relo, fixup_log_missing_kfunc_call)."""
    lines = [f"prog '{prog.name}': BPF program load failed: {strerror(exc.errno)}"]
    for p in poisoned:
        if f"unknown#{POISON_IMM}" in exc.log:
            lines.append(f"prog '{prog.name}': relo #{p.relo_index}: insn #{p.insn}: failed "
                         f"to resolve CO-RE relocation {p.description}")
    for index, name in enumerate(kfunc_ids):
        if f"unknown#{POISON_CALL_KFUNC_BASE + index}" in exc.log:
            lines.append(f"prog '{prog.name}': kfunc '{name}' is referenced but wasn't "
                         f"resolved: the kernel lacks it; guard its calls with "
                         f"bpf_ksym_exists({name})")
    return VerifierError(exc.errno, "\n".join(lines), log=exc.log, command="prog_load",
                         map=exc.map, detail=exc.detail, hint=exc.hint)
