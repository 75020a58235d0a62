"""The ``/metrics`` families sampled from the parts that count for themselves
(telephony/sampling.py): the SIP guard's and agent's drops, the recognition threads' queue,
the recordings journal's held updates (a real SQLite file made to refuse growth, as a full
disk does), the trunks' states."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from prometheus_client import REGISTRY

from callhook.config.settings import load
from callhook.edge.speechworkers import SpeechService
from callhook.events import Alternative, RecognitionOptions
from callhook.sip.agent import Agent
from callhook.sip.guard import Guard
from callhook.store import journal as journal_module
from callhook.store.database import Database
from callhook.store.journal import RecordingJournal
from callhook.telephony.sampling import Sampler
from callhook.telephony.trunking import Trunks

TRUNKS = """
[trunks.provider]
registrar = "127.0.0.1:5090"
username = "me"
password = "secret"

[trunks.office]
outbound_proxy = "127.0.0.1:5092"
"""


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Slow:
    """A recogniser that answers only when let go (a unit test of this one layer)."""

    name = "slow"
    languages = frozenset({"en"})

    def __init__(self) -> None:
        self.go = threading.Event()

    def warm_up(self) -> None:
        pass

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        self.go.wait(10)
        return (Alternative("seven", 0.9),)

    def restarted(self) -> Slow:
        return self


async def test_each_part_is_read_into_its_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "RETRY_FIRST", 3600.0)  # held for the test
    guard = Guard(rate=1)
    agent = Agent("127.0.0.1", 5060)
    (tmp_path / "callhook.toml").write_text(TRUNKS)
    trunks = Trunks(load(tmp_path / "callhook.toml").trunks, lambda: agent)
    db = Database(tmp_path / "state.sqlite3")
    journal = RecordingJournal(db)
    engine = Slow()
    speech = SpeechService(None, engine, workers=1)
    sampler = Sampler(guard, lambda: agent, lambda: None, trunks, lambda: [speech], journal)
    dropped = "callhook_packets_dropped_total"
    before = {
        cause: value(dropped, protocol="sip", cause=cause)
        for cause in ("banned", "rate_limited", "not_allowed", "malformed")
    }
    try:
        # A flood from a public address: rate-limited, banned, then dropped as banned.
        for _ in range(5):
            guard.admit("203.0.113.9", 100.0)
        agent.receive(b"INVITE nonsense\r\n\r\n", ("127.0.0.1", 5070), 100.0)
        # Three utterances for one recognition thread: one decoding, two waiting.
        audio = np.zeros(8000, dtype=np.int16)
        decodes = [asyncio.ensure_future(speech.recognise(audio, RecognitionOptions()))]
        for _ in range(2):
            await asyncio.sleep(0.2)
            decodes.append(asyncio.ensure_future(speech.recognise(audio, RecognitionOptions())))
        await asyncio.sleep(0.2)
        # A full disk: the journal's update is held in memory.
        pages = db.call(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        db.call(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))
        journal.started(
            "app", "recordings/r.wav", encrypted=False, record_id="m",
            notify=("http://a/n", "POST"), body={"padding": "x" * 20000},
        ).result()  # fmt: skip

        sampler.sample(100.0)
        sampler.sample(100.5)  # (a second sample adds only what is new)
        gained = {
            cause: value(dropped, protocol="sip", cause=cause) - before[cause] for cause in before
        }
        assert gained == {"banned": 2, "rate_limited": 1, "not_allowed": 2, "malformed": 1}
        assert value("callhook_speech_recognitions_queued", engine="slow") == 2
        assert value("callhook_recording_journal_held_updates") == 1
        states = {
            (trunk, state): value("callhook_trunk_state", trunk=trunk, state=state)
            for trunk in ("provider", "office")
            for state in ("registered", "registering", "static")
        }
        assert states == {
            ("provider", "registered"): 0,
            ("provider", "registering"): 1,  # (its registration not begun)
            ("provider", "static"): 0,
            ("office", "registered"): 0,
            ("office", "registering"): 0,
            ("office", "static"): 1,
        }
        engine.go.set()
        await asyncio.gather(*decodes)
        sampler.sample(101.0)
        assert value("callhook_speech_recognitions_queued", engine="slow") == 0
    finally:
        engine.go.set()
        speech.close()
        db.close()
