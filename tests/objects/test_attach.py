"""Auto-attach by section name, as libbpf does: tracepoints and raw tracepoints by
themselves, XDP to the interface given; closing a link detaches its program."""

from __future__ import annotations

import errno
import os

import pytest

from pybpf import netns
from pybpf.bpf_object import ObjectError, ObjectSpec


@pytest.fixture
def prog_types(build_object, backend):
    spec = ObjectSpec.from_file(build_object("prog_types"))
    spec.set_autoload("on_tp_btf", False)  # TRACING programs load on the kernel only
    with spec.load(backend) as obj:
        yield obj


def _hits(obj) -> dict[int, int]:
    return {k: v for k, v in obj.maps["hits"].items() if v}


def test_tracepoints_and_raw_tracepoints_attach_by_section_name(prog_types, backend):
    links = prog_types.attach()
    attached = sorted(name for name, prog in prog_types.programs.items()
                      if any(link.program is prog for link in links))
    assert attached == ["on_raw_tp", "on_raw_tracepoint", "on_tp", "on_tracepoint"]
    if backend.name == "emulated":
        backend.trigger_tracepoint("syscalls", "sys_enter_getppid")
        backend.trigger_tracepoint("syscalls", "sys_enter_getpgid")
        backend.trigger_raw_tracepoint("sys_enter", (0, 39))
        backend.trigger_raw_tracepoint("sys_exit", (0, 0))
    else:
        os.getppid()
        os.getpgid(0)
    hits = _hits(prog_types)
    # On the kernel other processes' syscalls count too: at least once each.
    assert all(hits.get(slot, 0) >= 1 for slot in (5, 6, 7, 8)), hits
    for link in links:
        link.close()
    before = _hits(prog_types)
    if backend.name == "emulated":
        backend.trigger_tracepoint("syscalls", "sys_enter_getppid")
        assert _hits(prog_types) == before


def test_xdp_attaches_to_the_interface_given(prog_types, backend):
    with pytest.raises(ObjectError, match="prog 'on_xdp': an XDP program attaches to a "
                                          "network device: pass ifindex="):
        prog_types.attach_program("on_xdp")
    if backend.name == "emulated":
        link = prog_types.attach_program("on_xdp", ifindex=1)
        with pytest.raises(OSError) as info:
            prog_types.attach_program("on_xdp_frags", ifindex=1)
        assert info.value.errno == errno.EBUSY
        link.close()
        prog_types.attach_program("on_xdp_frags", ifindex=1).close()
        return
    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    with netns.NetNamespace() as ns:
        ns.add_veth("pybpf0", "pybpf1")
        with ns.entered():
            ifindex = ns.ifindex("pybpf0")
            link = prog_types.attach_program("on_xdp", ifindex=ifindex)
            with pytest.raises(OSError) as info:
                prog_types.attach_program("on_xdp_frags", ifindex=ifindex)
            assert info.value.errno == errno.EBUSY
            link.close()
            prog_types.attach_program("on_xdp_frags", ifindex=ifindex).close()


def test_sections_that_do_not_auto_attach(prog_types):
    with pytest.raises(Exception, match="prog 'on_socket': section 'socket' is not "
                                        "auto-attachable"):
        prog_types.attach_program("on_socket")
