"""A WebSocket far leg against real local servers: the handshake's outcomes and raw causes,
the protocol chosen, the server's hang-up and Close frame, a lost connection, callhook's
hang-up (telephony/websocketleg.py, with the real media tick)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from callhook.edge.egress import Egress
from callhook.edge.egresspolicy import EgressPolicy
from callhook.edge.mediaengine import MediaEngine
from callhook.media.session import MediaSession
from callhook.telephony.websocketleg import WebSocketLeg
from callhook.telephony.wsprotocol import V1, V2
from tests.e2e.wsagent import Agent


class Outcome:
    def __init__(self) -> None:
        self.ended: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()
        self.session: MediaSession | None = None

    def answered(self, session: MediaSession, key: int) -> None:
        self.session = session

    def end(self, cause: str, raw: str) -> None:
        assert not self.ended.done(), "ended twice"
        self.ended.set_result((cause, raw))


@contextlib.asynccontextmanager
async def leg_to(
    url: str, ca_file: Path | None = None, egress: Egress | None = None
) -> AsyncIterator[tuple[WebSocketLeg, Outcome]]:
    media = MediaEngine("127.0.0.1")
    outcome = Outcome()
    ca = ssl.create_default_context(cafile=str(ca_file)) if ca_file is not None else None
    leg = WebSocketLeg(
        url,
        {"call_id": "ws-test"},
        media,
        label="far leg ws-test",
        egress=egress,
        ca=ca,
        answered=outcome.answered,
        ended=outcome.end,
        wake=lambda session: None,
    )
    leg.start()
    try:
        yield leg, outcome
    finally:
        leg.hang_up("completed")
        await asyncio.wait_for(asyncio.shield(outcome.ended), 10)
        media.shutdown()


async def ended(outcome: Outcome) -> tuple[str, str]:
    return await asyncio.wait_for(asyncio.shield(outcome.ended), 15)


@pytest.mark.parametrize(
    ("url", "raw"),
    [("wss:///no-host", "901"), ("https://example.com/", "901"), ("wss://127.0.0.1:99999/", "901"),
     ("wss://callhook-test.invalid/agent", "902")],
)  # fmt: skip
async def test_a_url_that_cannot_be_called_gives_its_raw_cause(url: str, raw: str) -> None:
    async with leg_to(url) as (_, outcome):
        assert await ended(outcome) == ("unobtainable", raw)
        assert outcome.session is None


async def test_nobody_listening_is_903_and_an_egress_refusal_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with Agent(tmp_path) as agent:
        refusing = Egress(EgressPolicy(allow_private=False))
        with caplog.at_level(logging.WARNING):
            async with leg_to(agent.url, agent.ca_file, egress=refusing) as (_, outcome):
                assert await ended(outcome) == ("failed", "903")
        assert not agent.offered  # it never got the request
        assert "loopback" in caplog.text or "private" in caplog.text, caplog.text
    async with leg_to(agent.url, agent.ca_file) as (_, outcome):  # closed now
        assert await ended(outcome) == ("failed", "903")


async def test_a_certificate_from_an_unknown_ca_is_904(tmp_path: Path) -> None:
    async with Agent(tmp_path) as agent, leg_to(agent.url) as (_, outcome):
        assert await ended(outcome) == ("failed", "904")


async def test_a_handshake_status_is_the_raw_cause(tmp_path: Path) -> None:
    async with Agent(tmp_path, status=503) as agent, leg_to(agent.url, agent.ca_file) as (_, o):
        assert await ended(o) == ("busy", "503")
        assert agent.offered == [V2, V1]


async def test_an_answer_that_is_not_http_is_905() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, leg_to(f"ws://127.0.0.1:{port}/agent") as (_, outcome):
        assert await ended(outcome) == ("failed", "905")


async def test_the_handshake_says_it_is_callhook() -> None:
    """callhook's own User-Agent: the web phone gives what a page makes callhook connect to
    no loopback rights (telephony/webphone.py, own_client)."""
    heads: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, leg_to(f"ws://127.0.0.1:{port}/phone/call") as (_, outcome):
        await ended(outcome)
    assert heads and all(b"\r\nUser-Agent: callhook/" in head for head in heads), heads


async def test_the_servers_hangup_message_ends_the_call_with_its_raw_cause(
    tmp_path: Path,
) -> None:
    async def hang_up(agent: Agent, ws: web.WebSocketResponse) -> None:
        await ws.send_str(json.dumps({"type": "call_hangup", "raw_cause": "480"}))

    async with Agent(tmp_path, hang_up) as agent, leg_to(agent.url, agent.ca_file) as (leg, o):
        assert await ended(o) == ("hung_up", "480")
        assert o.session is not None and leg.protocol == V2
        assert o.session.event_payload_type == 101  # v2: digits come as events, not tones


async def test_a_close_frame_gives_its_code_and_v1_when_the_server_chooses_nothing(
    tmp_path: Path,
) -> None:
    async def close(agent: Agent, ws: web.WebSocketResponse) -> None:
        await ws.close(code=4001)

    async with (
        Agent(tmp_path, close, protocols=()) as agent,
        leg_to(agent.url, agent.ca_file) as (leg, outcome),
    ):
        assert await ended(outcome) == ("hung_up", "4001")
        assert leg.protocol == V1 and agent.protocol is None
        assert outcome.session is not None and outcome.session.event_payload_type is None


async def test_a_lost_connection_is_a_failure_1006(tmp_path: Path) -> None:
    async def vanish(agent: Agent, ws: web.WebSocketResponse) -> None:
        transport = ws._writer.transport if ws._writer is not None else None  # no Close frame
        assert transport is not None
        transport.abort()

    async with Agent(tmp_path, vanish) as agent, leg_to(agent.url, agent.ca_file) as (_, o):
        assert await ended(o) == ("failed", "1006")


async def test_callhooks_hang_up_sends_call_hangup_then_closes(tmp_path: Path) -> None:
    async with Agent(tmp_path) as agent, leg_to(agent.url, agent.ca_file) as (leg, outcome):
        await asyncio.wait_for(agent.started.wait(), 10)
        await asyncio.sleep(0.2)  # some audio flows (20 ms frames of silence)
        leg.hang_up("completed")
        assert await ended(outcome) == ("completed", "")
        await asyncio.wait_for(agent.closed.wait(), 10)
    assert agent.messages[-1] == {"type": "call_hangup", "call_cause": "completed"}
    assert agent.arrivals and all(size == 320 for _, size in agent.arrivals)


async def test_clear_drops_the_servers_audio_not_yet_played(tmp_path: Path) -> None:
    async def burst_then_clear(agent: Agent, ws: web.WebSocketResponse) -> None:
        await ws.send_bytes(bytes(16000 * 5))  # five seconds
        await asyncio.sleep(0.3)
        await ws.send_str(json.dumps({"type": "clear"}))
        await ws.send_str(json.dumps({"type": "what is this"}))

    async with (
        Agent(tmp_path, burst_then_clear) as agent,
        leg_to(agent.url, agent.ca_file) as (leg, _),
    ):
        async with asyncio.timeout(10):
            while leg.pacer.played < 5:
                await asyncio.sleep(0.02)
        async with asyncio.timeout(10):
            while leg.pacer.buffered:
                await asyncio.sleep(0.02)
        assert leg.pacer.played < 100  # far less than the five seconds sent
