"""A worker other than worker 0 follows the phones' bindings stored in the database
(telephony/users.py, ``serve --workers``): what it reads replaces what it knew, except a
read that may predate a REGISTER this worker took meanwhile (worker 0 gone)."""

from __future__ import annotations

import asyncio
import time

import pytest

from callhook.sip.guard import Guard
from callhook.sip.registrar import Registrar
from callhook.sip.transport import Target
from callhook.store.bindings import StoredBinding
from callhook.telephony import users as users_module
from callhook.telephony.users import Users


def stored(contact_host: str) -> StoredBinding:
    return StoredBinding(
        "alice",
        f"sip:alice@{contact_host}:5060",
        f"call-{contact_host}",
        1,
        time.time() + 600,
        ("udp", contact_host, 5060),
        ("udp", contact_host, 5060),
    )


class Reads:
    """The database's answers, one per read; ``overlapping``: the first read overlaps a
    REGISTER this worker stored."""

    def __init__(
        self, follower: Users, answers: list[list[StoredBinding]], *, overlapping: bool
    ) -> None:
        self.follower = follower
        self.answers = answers
        self.overlapping = overlapping
        self.reads = 0
        self.done = asyncio.Event()

    async def fetch(self, wall_now: float) -> list[StoredBinding]:
        self.reads += 1
        if self.reads == 1 and self.overlapping:
            self.follower.stored_changes += 1  # a REGISTER stored while this read ran
        if not self.answers:
            self.done.set()
            await asyncio.Event().wait()  # no more: the test ends the task
        return self.answers.pop(0)


async def follow(follower: Users, reads: Reads) -> None:
    task = asyncio.create_task(follower._follow_bindings(reads))  # type: ignore[arg-type]
    await asyncio.wait_for(reads.done.wait(), 5)
    task.cancel()


async def test_a_follower_takes_the_stored_bindings_but_not_a_read_older_than_its_own_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(users_module, "FOLLOW_SECONDS", 0.0)
    registrar = Registrar({"alice": "a long password"}, b"k" * 32)
    follower = Users(
        {},
        secret="s",
        algorithms=("MD5",),
        behind_front=True,
        lead=False,
        db=None,  # type: ignore[arg-type]  # (the reads are the test's: Reads)
        guard=Guard(),
        trunks=None,  # type: ignore[arg-type]
        shared_bans=lambda: None,
        loop=asyncio.get_running_loop(),
    )
    follower.registrar = registrar  # (started: the worker's registrar)

    def targets() -> list[Target]:
        return [b.target for b in registrar.bindings("alice", follower.loop.time())]

    # The phone this worker just registered (worker 0 gone), stored as the read ran: the
    # read, which may not have it, does not replace it.
    offset = follower.loop.time() - time.time()
    mine = users_module._binding(stored("192.0.2.6"), offset)
    assert mine is not None
    registrar.load([mine], follower.loop.time())
    await follow(follower, Reads(follower, [[]], overlapping=True))
    assert targets() == [Target("192.0.2.6", 5060)]
    # A read with no write of its own meanwhile is what there is: worker 0's bindings.
    reads = Reads(follower, [[stored("192.0.2.7"), stored("192.0.2.8")]], overlapping=False)
    await follow(follower, reads)
    assert targets() == [Target("192.0.2.7", 5060), Target("192.0.2.8", 5060)]
    assert reads.reads == 2
