"""The RTP port range (edge/rtpports.py): even ports, RTCP above, taken ports skipped."""

from __future__ import annotations

import socket

import pytest

from callhook.edge.rtpports import RtpPorts


def free_even_range(span: int) -> int:
    """The first of ``span`` consecutive ports none of which is bound now (a best effort:
    the test binds them at once)."""
    for base in range(41000, 60000, 64):
        probes = []
        try:
            for port in range(base, base + span):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                probes.append(s)
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for s in probes:
                s.close()
        return base
    raise RuntimeError("no free port range")


def test_each_call_gets_an_even_port_and_its_rtcp_socket_the_odd_one_above() -> None:
    base = free_even_range(8)
    ports = RtpPorts("127.0.0.1", base + 1, base + 8)  # (an odd first port: the next even)
    sock, port = ports.allocate()
    rtcp = ports.rtcp_socket(sock, port)
    try:
        assert port == base + 2
        assert sock.getsockname() == ("127.0.0.1", port)
        assert rtcp is not None and rtcp.getsockname() == ("127.0.0.1", port + 1)
        assert not sock.getblocking() and not rtcp.getblocking()
    finally:
        sock.close()
        if rtcp is not None:
            rtcp.close()


def test_a_port_another_process_holds_is_skipped_and_a_taken_rtcp_port_means_no_rtcp() -> None:
    base = free_even_range(6)
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.bind(("127.0.0.1", base))  # the first port: taken
    rtcp_holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rtcp_holder.bind(("127.0.0.1", base + 3))  # the second's RTCP port: taken
    ports = RtpPorts("127.0.0.1", base, base + 6)
    try:
        sock, port = ports.allocate()
        assert port == base + 2
        assert ports.rtcp_socket(sock, port) is None
        sock.close()
        # The taken port went to the back of the queue: tried again later.
        second, port2 = ports.allocate()
        assert port2 == base + 4
        second.close()
        holder.close()
        third, port3 = ports.allocate()
        assert port3 == base
        third.close()
    finally:
        holder.close()
        rtcp_holder.close()


def test_an_exhausted_range_says_so_and_a_freed_port_is_used_again() -> None:
    base = free_even_range(4)
    ports = RtpPorts("127.0.0.1", base, base + 4)
    a, pa = ports.allocate()
    b, pb = ports.allocate()
    assert pb == pa + 2
    assert len(ports) == 0
    with pytest.raises(OSError, match="no free RTP port"):
        ports.allocate()
    a.close()
    ports.free(pa)
    c, pc = ports.allocate()
    assert pc == pa
    b.close()
    c.close()
