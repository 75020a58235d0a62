"""What the RTP a server sent looks like, read off a tcpdump capture on loopback.

:func:`rtp_gaps`: the time between consecutive packets of each stream (ideal 20 ms).
:func:`prompts_whole`: how many calls heard the load kit's prompt whole, every frame of it
in order with nothing between: a server that sends silence where the prompt's frame was
late keeps its gaps at 20 ms and still cuts holes in the prompt. The capture keeps the
first 80 bytes of each packet (``tcpdump -s 80``): the headers and the first 26 bytes of
the payload, which tell the prompt's 150 frames apart.
"""

from __future__ import annotations

import itertools
import re
import statistics
import struct
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

#: Payload bytes compared to tell a prompt's frame (what a 80-byte capture keeps of it).
PREFIX = 16
FRAME = 160


def _packets(pcap: Path) -> Iterator[tuple[tuple[int, int, bytes], float, bytes]]:
    """Each RTP packet (even source port) of the capture: its stream (ports and SSRC),
    time and the payload bytes captured."""
    for stream, at, rtp in _rtp(pcap):
        yield stream, at, rtp[12:]


def _rtp(pcap: Path) -> Iterator[tuple[tuple[int, int, bytes], float, bytes]]:
    """Each RTP packet (even source port) of the capture: its stream (ports and SSRC),
    time and the RTP bytes captured, from its header on."""
    data = pcap.read_bytes()
    if len(data) < 24:
        return
    magic = struct.unpack_from("<I", data)[0]
    nano = magic == 0xA1B23C4D
    linktype = struct.unpack_from("<I", data, 20)[0]
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack_from("<IIII", data, pos)
        frame = data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        offset = {1: 14, 113: 16, 0: 4, 276: 20}.get(linktype, 14)  # Ethernet, SLL, null, SLL2
        ihl = (frame[offset] & 0x0F) * 4 if len(frame) > offset else 0
        rtp = offset + ihl + 8  # the RTP header, after the IP and UDP ones
        if ihl == 0 or len(frame) < rtp + 12:
            continue
        sport, dport = struct.unpack_from("!HH", frame, offset + ihl)
        if sport & 1:
            continue  # RTCP (odd ports): reports every few seconds, not the audio stream
        ssrc = frame[rtp + 8 : rtp + 12]  # RFC 3550 §5.1
        yield (sport, dport, ssrc), sec + frac / (1e9 if nano else 1e6), frame[rtp:]


def rtp_gaps(pcap: Path) -> list[float]:
    """Gaps (ms) between consecutive RTP packets of each stream in a tcpdump capture on lo.

    A stream is its ports and its SSRC: a server that gives a port back when a call ends
    may send a later call's stream between the same ports (Asterisk does, within a
    minute), and the time between the two calls is no gap of either."""
    flows: dict[tuple[int, int, bytes], list[float]] = defaultdict(list)
    for stream, at, _ in _packets(pcap):
        flows[stream].append(at)
    gaps: list[float] = []
    for times in flows.values():
        times.sort()
        gaps += [(b - a) * 1000 for a, b in itertools.pairwise(times)]
    return gaps


def _same(payload: bytes) -> bytes:
    """μ-law's two zeros (0x7F and 0xFF) as one: a prompt decoded and encoded again
    gives 0xFF for both."""
    return payload[:PREFIX].replace(b"\x7f", b"\xff")


def capture_dropped(pcap: Path) -> int:
    """The packets tcpdump says the kernel dropped from the capture (its counts, which
    :func:`bench.ivr_load.capture` keeps beside it): gaps and holes there are the
    capture's, not the server's. -1 where it said nothing."""
    said = pcap.with_suffix(".txt")
    found = (
        re.search(r"(\d+) packets? dropped by kernel", said.read_text()) if said.exists() else None
    )
    return int(found.group(1)) if found else -1


def prompts_whole(pcap: Path, prompt: bytes) -> tuple[int, int, list[float]]:
    """(streams in which the prompt (G.711, whole frames) played whole, streams in which
    any frame of it played, and for each of those where its first frame played, how long
    after the stream's first packet it did, in seconds): whole is every frame, in order,
    one packet each, with no other packet between them."""
    frames = [_same(prompt[i : i + FRAME]) for i in range(0, len(prompt) - FRAME + 1, FRAME)]
    index = {f: i for i, f in enumerate(frames)}
    if len(index) < len(frames) or len(frames[0]) < PREFIX:
        raise ValueError("the prompt's frames cannot be told apart by their first bytes")
    flows: dict[tuple[int, int, bytes], list[tuple[float, int]]] = defaultdict(list)
    for stream, at, payload in _packets(pcap):
        flows[stream].append((at, index.get(_same(payload), -1)))
    whole = played = 0
    starts: list[float] = []
    for packets in flows.values():
        packets.sort()
        marks = [i for _, i in packets]
        if all(i < 0 for i in marks):
            continue
        played += 1
        if 0 in marks:
            start = marks.index(0)
            whole += marks[start : start + len(frames)] == list(range(len(frames)))
            starts.append(packets[start][0] - packets[0][0])
    return whole, played, starts


def digits_astray(pcap: Path, clock: int = 8000) -> list[float]:
    """For each stream of telephone events (RFC 4733) in the capture (the caller's key
    presses, as :func:`bench.ivr_load.capture_events` keeps them), how far the caller's
    sending strayed from its schedule, in seconds: each event's first packet should follow
    the first event's by the time its RTP timestamp says (RFC 4733 §2.5.1.2: an event's
    packets carry the timestamp of its start), so this is the spread of (time sent - time
    due). A driver whose thread stalled sends the events due meanwhile in one burst: the
    server cannot have heard them in time, whatever it does."""
    starts: dict[tuple[int, int, bytes], dict[int, float]] = defaultdict(dict)
    for stream, at, rtp in _rtp(pcap):
        if rtp[1] & 0x7F != 101:
            continue  # (the first packet of the caller's audio: late_starts)
        timestamp = struct.unpack_from("!I", rtp, 4)[0]
        starts[stream].setdefault(timestamp, at)  # (the capture is in time order)
    astray: list[float] = []
    for events in starts.values():
        first_ts = min(events, key=lambda ts: events[ts])
        offsets = [at - ((ts - first_ts) % 2**32) / clock for ts, at in events.items()]
        astray.append(max(offsets) - min(offsets))
    return astray


def server_starts(pcap: Path) -> dict[int, list[float]]:
    """When each stream the server sent began, by the server's port (a port serves one
    call after another: each call's stream has its own SSRC), in time order."""
    first: dict[tuple[int, int, bytes], float] = {}
    for stream, at, _ in _rtp(pcap):
        first.setdefault(stream, at)
    starts: dict[int, list[float]] = defaultdict(list)
    for (port, _, _), at in first.items():
        starts[port].append(at)
    return {port: sorted(times) for port, times in starts.items()}


def late_starts(pcap: Path, server: dict[int, list[float]], grace: float = 1.0) -> list[float]:
    """For each call whose caller began its stream (the marked first packet of its audio,
    in a capture of what the caller sent: :func:`bench.ivr_load.capture_events`) more
    than ``grace`` seconds after the server began its own on the same port (the server's
    answer: ``server``, :func:`server_starts`), by how much. The caller plays its stream
    once the call is answered; a driver that starts it seconds late sends every key press
    that late, and no server can hear them on time."""
    late: list[float] = []
    for (_, port, _), at, rtp in _rtp(pcap):
        if rtp[1] & 0x7F == 101 or not rtp[1] & 0x80:
            continue
        # The server's stream on that port that began last before the caller's did
        # (give or take the first tick: the caller may send first).
        began = [s for s in server.get(port, []) if s <= at + 0.5]
        if began and at - began[-1] > grace:
            late.append(at - began[-1])
    return late


def quantiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return (float("nan"), float("nan"), float("nan"))
    q = statistics.quantiles(values, n=100)
    return q[49], q[98], max(values)
