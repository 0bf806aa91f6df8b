"""pybpf.testing.rps: RPS masks set for a block and restored, in a network namespace."""

from __future__ import annotations

import errno

import pytest

from pybpf import netns
from pybpf.testing.rps import cpu_mask, parse_cpu_mask, read_rps_cpus, rps_cpus

REASON = netns.unavailable()
needs_netns = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def test_cpu_mask_is_written_in_32_bit_groups_and_read_back():
    assert cpu_mask([]) == "0"
    assert cpu_mask([0, 1]) == "3"
    assert cpu_mask([1, 33]) == "2,00000002"
    assert parse_cpu_mask("00000002,00000002\n") == {1, 33}
    assert parse_cpu_mask("0") == frozenset()


@pytest.mark.parametrize("cpus, exc", [([-1], ValueError), (["1"], TypeError),
                                       ([True], TypeError), ([4096], ValueError)])
def test_bad_cpus_are_refused_before_anything_is_written(cpus, exc):
    with pytest.raises(exc):
        with rps_cpus("lo", cpus):
            pass


@pytest.mark.parametrize("dev", ["", "a/b", "x" * 16, "..", 5])
def test_bad_device_names_are_value_errors(dev):
    with pytest.raises(ValueError):
        with rps_cpus(dev, [0]):
            pass


@needs_netns
def test_rps_is_set_for_the_block_and_restored_in_the_namespace_only():
    host = open("/sys/class/net/lo/queues/rx-0/rps_cpus").read()
    with netns.NetNamespace() as ns:
        before = read_rps_cpus("lo", netns=ns)
        assert set(before) == {"rx-0"}
        with rps_cpus("lo", [0], netns=ns) as cpus:
            assert cpus == {0}
            assert read_rps_cpus("lo", netns=ns) == {"rx-0": {0}}
            with ns.entered():  # the calling thread's namespace is the default
                assert read_rps_cpus("lo") == {"rx-0": {0}}
            assert open("/sys/class/net/lo/queues/rx-0/rps_cpus").read() == host
        assert read_rps_cpus("lo", netns=ns) == before


@needs_netns
def test_rps_is_restored_when_the_block_raises_and_empty_turns_it_off():
    with netns.NetNamespace() as ns:
        ns.set_rps("lo", [0])
        with pytest.raises(KeyError):
            with rps_cpus("lo", [], netns=ns):
                assert read_rps_cpus("lo", netns=ns) == {"rx-0": frozenset()}
                raise KeyError("body failed")
        assert read_rps_cpus("lo", netns=ns) == {"rx-0": {0}}


@needs_netns
def test_missing_device_is_enodev_and_closed_namespace_a_value_error():
    ns = netns.NetNamespace()
    with pytest.raises(OSError) as info:
        with rps_cpus("pbnope0", [0], netns=ns):
            pass
    assert info.value.errno == errno.ENODEV and "pbnope0" in str(info.value)
    ns.close()
    with pytest.raises(ValueError, match="closed"):
        read_rps_cpus("lo", netns=ns)


@needs_netns
def test_sockmap_redirect_moves_bytes_intact_with_rps_on_the_namespace_loopback(kernel):
    import socket
    import threading

    from pybpf import SockMap
    from pybpf.programs import Program, ProgramSpec
    from pybpf.sock_maps import redirect_verdict
    from pybpf.uapi import ProgType

    data = bytes(range(256)) * (16 << 10)  # 4 MiB
    with netns.NetNamespace() as ns, rps_cpus("lo", [1], netns=ns):
        with ns.entered():
            pairs = []
            for _ in range(2):
                with socket.create_server(("127.0.0.1", 0)) as server:
                    client = socket.create_connection(server.getsockname())
                    pairs.append((client, server.accept()[0]))
        (c1, p1), (c2, p2) = pairs
        socks = SockMap(2, system=kernel)
        socks.attach(Program.load(ProgramSpec(ProgType.SK_SKB, redirect_verdict(socks, 1)),
                                  kernel), "skb_verdict")
        socks[0], socks[1] = p1, p2
        sender = threading.Thread(target=c1.sendall, args=(data,), daemon=True)
        sender.start()
        got = bytearray()
        while len(got) < len(data) and (chunk := kernel.sock_recv(c2, 1 << 20, timeout=10)):
            got += chunk
        sender.join(10)
        assert not sender.is_alive() and bytes(got) == data
        for sock in (c1, p1, c2, p2):
            sock.close()
