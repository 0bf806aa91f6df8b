"""Emulated network devices: the registry, veth pairs and their NAPI, XDP attach rules, devmap
redirects to devices, generic XDP."""

from __future__ import annotations

import errno
import struct

import pytest

from pybpf.asm import R0, R1, R2
from pybpf.asm import builder as b
from pybpf.errors import KernelError
from pybpf.packet import udp_frame
from pybpf.uapi import BPF_F_BROADCAST, BPF_F_EXCLUDE_INGRESS, AttachType, MapType, XdpFlags
from xdp_lab import (
    PORT,
    XDP_DROP,
    XDP_PASS,
    XDP_TX,
    action_prog,
    redirect_prog,
    u32,
    xdp,
)


def test_a_veth_pair_registers_the_peer_first_as_in_a_fresh_namespace(make_lab):
    lab = make_lab()
    assert (lab.net.dev_get_by_index(1).name, lab.vB.ifindex, lab.vA.ifindex) == ("lo", 2, 3)
    assert lab.vA.peer is lab.vB and lab.vB.peer is lab.vA
    assert lab.vA.real_num_rx_queues == 2 and lab.vA.mac != lab.vB.mac
    assert lab.net.dev_get_by_name("vB") is lab.vB
    with pytest.raises(ValueError, match="exists"):
        lab.net.add_device("vA")


def test_frames_sent_to_a_veth_without_napi_fail_until_gro_or_xdp_enables_it(make_lab):
    lab = make_lab(gro=False)
    gen = action_prog(lab.system, XDP_TX)
    lab.live(gen, lab.frame(), 8, dev=lab.vA)
    assert lab.vA.counters()["xdp_xmit_err"] == 8  # veth_xdp_xmit: -ENXIO
    assert "rx_packets" not in lab.vB.counters()
    lab.vB.set_gro(True)
    lab.live(gen, lab.frame(), 8, dev=lab.vA)
    assert lab.vB.counters()["rx_packets"] == 8
    assert len(lab.drain()) == 8


@pytest.mark.parametrize("flags,prog_attach,errnum,message", [
    (XdpFlags.SKB_MODE | XdpFlags.DRV_MODE, AttachType.XDP, errno.EINVAL,
     "Only one XDP mode flag can be set"),
    (0, AttachType.XDP_CPUMAP, errno.EINVAL,
     "BPF_XDP_CPUMAP programs can not be attached to a device"),
    (0, AttachType.XDP_DEVMAP, errno.EINVAL,
     "BPF_XDP_DEVMAP programs can not be attached to a device"),
    (XdpFlags.REPLACE, AttachType.XDP, errno.EEXIST, "Active program does not match"),
])
def test_xdp_attach_refuses_what_dev_xdp_attach_refuses(make_lab, flags, prog_attach, errnum,
                                                         message):
    lab = make_lab()
    progs = action_prog(lab.system, XDP_PASS, prog_attach), action_prog(lab.system, XDP_PASS)
    prog, other = (lab.system.prog_from_fd(p.fd) for p in progs)
    with pytest.raises(KernelError, match=message) as info:
        lab.net.dev_xdp_attach(lab.vB, prog, old_prog=other if flags & XdpFlags.REPLACE
                               else None, flags=flags)
    assert info.value.errno == errnum


def test_native_and_generic_modes_exclude_each_other_and_lo_has_no_native_mode(make_lab):
    lab = make_lab()
    prog = action_prog(lab.system, XDP_PASS)
    lab.attach(lab.vB, prog, XdpFlags.SKB_MODE)
    with pytest.raises(KernelError, match="Native and generic XDP") as info:
        lab.attach(lab.vB, prog, XdpFlags.DRV_MODE)
    assert info.value.errno == errno.EEXIST
    with pytest.raises(KernelError, match="already attached") as info:
        lab.attach(lab.vB, prog, XdpFlags.SKB_MODE | XdpFlags.UPDATE_IF_NOEXIST)
    assert info.value.errno == errno.EBUSY
    lo = lab.net.dev_get_by_index(1)
    with pytest.raises(KernelError, match="native mode") as info:
        lab.attach(lo, prog, XdpFlags.DRV_MODE)
    assert info.value.errno == errno.EOPNOTSUPP
    lab.attach(lo, prog)  # no mode asked: generic, since lo has no ndo_bpf
    assert lo.xdp_generic_prog is not None


def test_an_attached_program_is_held_until_replaced(make_lab):
    lab = make_lab()
    first, second = action_prog(lab.system, XDP_PASS), action_prog(lab.system, XDP_DROP)
    lab.attach(lab.vB, first)
    held = lab.system.prog_from_fd(first.fd)
    first_id = first.id
    first.close()
    assert lab.system.prog_from_id(first_id) is held
    lab.attach(lab.vB, second)
    with pytest.raises(KernelError):
        lab.system.prog_from_id(first_id)


def test_a_native_program_drops_redirects_and_sends_back(make_lab):
    lab = make_lab()
    nic = lab.net.add_device("eth0")
    nic.add_address("10.0.0.2")
    lab.attach(nic, action_prog(lab.system, XDP_TX))
    frames = [lab.frame(bytes([i]) * 20, ident=i) for i in range(5)]
    assert nic.receive(frames) == 5
    assert nic.transmitted() == frames  # XDP_TX: back out of the same device
    lab.attach(nic, action_prog(lab.system, XDP_DROP))
    nic.receive(frames)
    assert nic.counters()["xdp_drops"] == 5 and nic.transmitted() == []


def test_devmap_redirect_delivers_intact_frames_to_an_emulated_interface(make_lab):
    lab = make_lab()
    out = lab.net.add_device("eth1")
    dm = lab.system.map_create(MapType.DEVMAP, 4, 8, 4)
    lab.system.map_update_elem(dm, u32(0), struct.pack("<Ii", out.ifindex, 0))
    frames = [lab.frame(bytes([i]) * 30, ident=i) for i in range(40)]
    for frame in frames:
        lab.live(redirect_prog(lab.system, dm, 0), frame, 1)
    assert out.transmitted() == frames
    assert out.counters()["xdp_xmit"] == 40


def test_a_devmap_entrys_program_runs_before_the_device_sends(make_lab):
    lab = make_lab()
    eth1, eth2 = lab.net.add_device("eth1"), lab.net.add_device("eth2")
    drop = action_prog(lab.system, XDP_DROP, AttachType.XDP_DEVMAP)
    keep = action_prog(lab.system, XDP_PASS, AttachType.XDP_DEVMAP)
    dm = lab.system.map_create(MapType.DEVMAP_HASH, 4, 8, 4)
    for dev, prog in ((eth1, drop), (eth2, keep)):
        lab.system.map_update_elem(dm, u32(dev.ifindex), struct.pack("<Ii", dev.ifindex,
                                                                       prog.fd))
    lab.live(redirect_prog(lab.system, dm, eth1.ifindex), lab.frame(), 3)
    lab.live(redirect_prog(lab.system, dm, eth2.ifindex), lab.frame(), 3)
    assert (len(eth1.transmitted()), len(eth2.transmitted())) == (0, 3)
    assert eth1.counters()["xdp_prog_drops"] == 3


def test_a_devmap_program_sees_the_egress_device(make_lab):
    lab = make_lab()
    eth1, eth2 = lab.net.add_device("eth1"), lab.net.add_device("eth2")
    # pass only what leaves through eth2: egress_ifindex is at offset 20 of xdp_md
    only_eth2 = xdp(lab.system, [b.ldx(4, R2, R1, 20), b.mov64(R0, XDP_DROP),
                                 b.jne(R2, eth2.ifindex, "out"), b.mov64(R0, XDP_PASS),
                                 b.label("out"), b.exit_()], attach=AttachType.XDP_DEVMAP)
    dm = lab.system.map_create(MapType.DEVMAP, 4, 8, 2)
    for i, dev in enumerate((eth1, eth2)):
        lab.system.map_update_elem(dm, u32(i), struct.pack("<Ii", dev.ifindex, only_eth2.fd))
    lab.live(redirect_prog(lab.system, dm, 0), lab.frame(), 2)
    lab.live(redirect_prog(lab.system, dm, 1), lab.frame(), 2)
    assert (len(eth1.transmitted()), len(eth2.transmitted())) == (0, 2)


def test_a_broadcast_reaches_every_device_but_the_excluded_ingress(make_lab):
    lab = make_lab()
    devs = [lab.net.add_device(f"eth{i}") for i in range(3)]
    dm = lab.system.map_create(MapType.DEVMAP, 4, 4, 4)
    for i, dev in enumerate(devs):
        lab.system.map_update_elem(dm, u32(i), u32(dev.ifindex))
    bcast = redirect_prog(lab.system, dm, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS)
    lab.live(bcast, lab.frame(), 2, dev=devs[1])
    assert [len(dev.transmitted()) for dev in devs] == [2, 0, 2]


def test_a_generic_program_runs_on_skbs_and_turns_gro_off_for_its_device(make_lab):
    lab = make_lab()
    nic = lab.net.add_device("eth0")
    nic.add_address("10.0.0.2")
    drop_odd = xdp(lab.system, [  # drop frames whose first payload byte is odd
        b.ldx(4, R2, R1, 0), b.ldx(4, R1, R1, 4), b.mov64(R0, R2), b.add64(R0, 43),
        b.jgt(R0, R1, "pass"), b.ldx(1, R0, R2, 42), b.and64(R0, 1), b.jeq(R0, 0, "pass"),
        b.mov64(R0, XDP_DROP), b.exit_(), b.label("pass"), b.mov64(R0, XDP_PASS), b.exit_()])
    lab.attach(nic, drop_odd, XdpFlags.SKB_MODE)
    nic.receive([udp_frame(nic.mac, lab.vA.mac, "10.0.0.1", "10.0.0.2", 1, PORT,
                           bytes([i]) * 18, ident=i) for i in range(8)])
    assert lab.drain() == [bytes([i]) * 18 for i in range(0, 8, 2)]
    assert nic.gro_counters()["merged"] == 0  # netif_elide_gro


def test_redirect_to_a_missing_ifindex_or_a_device_without_xmit_is_counted(make_lab):
    lab = make_lab()
    to_nowhere = xdp(lab.system, [b.mov64(R1, 77), b.mov64(R2, 0), b.call("redirect"),
                                  b.exit_()])
    lab.live(to_nowhere, lab.frame(), 4)
    to_lo = xdp(lab.system, [b.mov64(R1, 1), b.mov64(R2, 0), b.call("redirect"), b.exit_()])
    lab.live(to_lo, lab.frame(), 4)
    assert lab.vB.counters()["xdp_redirect_err"] == 8
