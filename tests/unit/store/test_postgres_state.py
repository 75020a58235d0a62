"""State shared by nodes in a real PostgreSQL server (callhook/store/postgres.py): who is
alive, whose recordings are finished by whom, notification leases (a row lock, not a
process lock), a server that drops the connection, and the errors a user sees.

The journal and the outbox themselves run on PostgreSQL in tests/unit/store/test_journal.py
(every test there on both databases).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from callhook.config.settings import ConfigError, load
from callhook.media import g711, tones, wav
from callhook.store.bindings import Bindings, StoredBinding
from callhook.store.journal import RecordingJournal
from callhook.store.outbox import LEASE_SECONDS, Outbox
from callhook.store.postgres import Nodes, PostgresDatabase, connect
from tests.postgres import Postgres, postgres_server, postgres_url  # noqa: F401 (fixtures)

BODY = {"application_instance_id": "i1", "token": "t", "log_filename": "logs/i1.log"}


@pytest.fixture
def db(postgres_url: str) -> Iterator[PostgresDatabase]:  # noqa: F811
    database = PostgresDatabase(postgres_url)
    yield database
    database.close()


class Clock:
    """The nodes' own (monotonic) clock: whether a node has been steady long enough."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def steady_nodes(db: PostgresDatabase, count: int, timeout: float = 30) -> list[Nodes]:
    """``count`` nodes that have been beating for longer than ``timeout``."""
    clock = Clock()
    nodes = [Nodes(db, timeout, clock=clock) for _ in range(count)]
    clock.now += timeout
    return nodes


def expire(db: PostgresDatabase, node: Nodes) -> None:
    """``node`` fell silent long ago (its machine stopped): its row ran out."""
    db.call(lambda c: c.execute("UPDATE nodes SET alive_until = 0 WHERE token = ?", (node.token,)))


def _recording(root: Path, name: str, seconds: float) -> None:
    path = root / "app" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    # A node killed mid-recording: the header says 0 bytes, the file holds them all.
    path.write_bytes(wav.g711_header("ulaw", 0) + g711.encode("ulaw", tones.tone(300.0, seconds)))


def test_each_node_sees_the_others_and_a_clean_stop_leaves(db: PostgresDatabase) -> None:
    a, b = steady_nodes(db, 2)
    assert a.others() == {b.token} and b.others() == {a.token}
    with a.gone(b.token) as gone:
        assert gone is False  # alive: its row runs until 30 s from now
    assert a.deliver_notifications() and b.deliver_notifications()  # every node delivers
    b.close()
    assert a.others() == set()
    a.close()


def test_a_silent_node_is_gone_and_one_survivor_finishes_its_recordings_once(
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Two survivors look at once (each on its own connection, as two machines would): the
    dead node's recordings are finished and announced once, by one of them."""
    media = tmp_path / "media"
    dbs = [PostgresDatabase(postgres_url) for _ in range(3)]
    dead = Nodes(dbs[0], 30)
    journal = RecordingJournal(dbs[0], ownership=dead)
    for i in range(6):
        journal.started(
            "app", f"recordings/{i}.wav", encrypted=False, record_id=str(i),
            notify=("http://a/n", "POST"), body=BODY,
        ).result()  # fmt: skip
        _recording(media, f"recordings/{i}.wav", 0.5)
    survivors = steady_nodes(dbs[1], 1) + steady_nodes(dbs[2], 1)
    journals = [RecordingJournal(d, ownership=n) for d, n in zip(dbs[1:], survivors, strict=True)]
    assert [j.recover(lambda a, n: media / a / n, at_start=False) for j in journals] == [0, 0]
    expire(dbs[0], dead)  # (it was killed: its row is not pushed on any more)
    counts: list[int] = []
    barrier = threading.Barrier(2)

    def survive(j: RecordingJournal) -> None:
        barrier.wait()
        counts.append(j.recover(lambda a, n: media / a / n, at_start=False))

    threads = [threading.Thread(target=survive, args=(j,)) for j in journals]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(counts)[-1] + sorted(counts)[0] == 6  # every recording, once between them
    rows = dbs[1].call(lambda c: c.execute("SELECT body FROM notifications").fetchall())
    names = sorted(json.loads(b)["action_result"]["result"]["filename"] for (b,) in rows)
    assert names == [f"recordings/{i}.wav" for i in range(6)]
    assert all(json.loads(b)["action_result"]["result"]["reason"] == "error" for (b,) in rows)
    assert dead.token not in survivors[0].others()  # its row is gone with it
    for n in survivors:
        n.close()
    for d in dbs:
        d.close()


def test_a_node_taken_for_gone_says_so_and_comes_back(
    db: PostgresDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    node, other = steady_nodes(db, 2)
    expire(db, node)
    with other.gone(node.token) as gone:
        assert gone
    assert node.token not in other.others()
    with caplog.at_level(logging.ERROR, "callhook.store"):
        node.beat()
    assert "taken for gone" in caplog.text
    assert node.token in other.others()  # alive again, for what it does from now on
    node.beat()
    with other.gone(node.token) as gone:
        assert not gone


def test_nodes_lease_the_notifications_they_send(
    db: PostgresDatabase,
    postgres_url: str,  # noqa: F811
) -> None:
    """Two nodes looking at once (two connections) never both get a row; a failed attempt
    gives it back; the rows a node held when it died are free once a survivor finds it
    gone."""
    db_b = PostgresDatabase(postgres_url)

    async def scenario() -> None:
        (a,), (b,) = steady_nodes(db, 1), steady_nodes(db_b, 1)
        outbox_a, outbox_b = Outbox(db, lease_owner=a.token), Outbox(db_b, lease_owner=b.token)
        for i in range(40):
            await outbox_a.add(f"app{i % 2}", "http://a/n", "POST", {"i": i}, 100.0)
        got_a, got_b = await asyncio.gather(
            outbox_a.due(200.0, {}, 40, 40, set()), outbox_b.due(200.0, {}, 40, 40, set())
        )
        ids_a, ids_b = {n.id for n in got_a}, {n.id for n in got_b}
        assert not ids_a & ids_b and len(ids_a | ids_b) == 40
        # Rows the other holds are not due for a node, nor counted as coming.
        assert await outbox_a.due(200.0, {}, 40, 40, ids_a) == []
        if not ids_b:
            assert await outbox_b.next_due(set(), 200.0) is None
        holder, other, got = (outbox_a, outbox_b, got_a) if got_a else (outbox_b, outbox_a, got_b)
        held = got[0]
        await holder.failed(held, "503", 200.0)  # given back, due again in 1-3 s, anywhere
        retry = await other.due(210.0, {}, 40, 40, set())
        assert [n.id for n in retry] == [held.id]
        # A lease runs out by itself too: a node that hung is not waited for forever.
        later = 200.0 + LEASE_SECONDS + 1
        again = await holder.due(later, {}, 40, 40, {held.id})
        assert {n.id for n in again} == (ids_a | ids_b) - {held.id}
        # Now the holder died holding 39 rows: found gone, they are free at once.
        survivor, survivor_box = (b, outbox_b) if holder is outbox_a else (a, outbox_a)
        dead = a if survivor is b else b
        assert await survivor_box.due(later, {}, 40, 40, {held.id}) == []
        expire(db, dead)
        with survivor.gone(dead.token) as gone:
            assert gone
        assert len(await survivor_box.due(later, {}, 40, 40, {held.id})) == 39

    try:
        asyncio.run(scenario())
    finally:
        db_b.close()


def test_a_streams_next_notification_waits_for_the_one_another_node_sends(
    db: PostgresDatabase,
    postgres_url: str,  # noqa: F811
) -> None:
    """A call's transcription results in order across nodes: while one node sends the
    first of a stream, no node gets the second; once it is answered, any node may."""
    db_b = PostgresDatabase(postgres_url)

    async def scenario() -> None:
        (a,), (b,) = steady_nodes(db, 1), steady_nodes(db_b, 1)
        outbox_a, outbox_b = Outbox(db, lease_owner=a.token), Outbox(db_b, lease_owner=b.token)
        first = await outbox_a.add("app", "http://a/r", "POST", {"n": 1}, 100.0, stream="s1")
        second = await outbox_a.add("app", "http://a/r", "POST", {"n": 2}, 100.0, stream="s1")
        other = await outbox_a.add("app", "http://a/r", "POST", {"n": 3}, 100.0, stream="s2")
        got = await outbox_a.due(200.0, {}, 40, 40, set())
        assert {n.id for n in got} == {first, other}
        assert await outbox_b.due(200.0, {}, 40, 40, set()) == []
        assert await outbox_b.next_due(set(), 200.0) is None  # (nothing it could send)
        await outbox_a.delivered(first)
        assert [n.id for n in await outbox_b.due(200.0, {}, 40, 40, set())] == [second]

    try:
        asyncio.run(scenario())
    finally:
        db_b.close()


def test_a_node_judges_others_only_once_it_has_been_steady_for_node_timeout(
    postgres_server: Postgres,  # noqa: F811
    postgres_url: str,  # noqa: F811
) -> None:
    """After an outage of the server every row has run out: the first node back must not
    take the others for gone before they had the time to beat again."""
    clock = Clock()
    db_a, db_b = PostgresDatabase(postgres_url), PostgresDatabase(postgres_url)
    a, b = Nodes(db_a, 30, clock=clock), Nodes(db_b, 30, clock=clock)
    expire(db_a, b)
    with a.gone(b.token) as gone:
        assert not gone  # a started 0 s ago: not steady yet
    clock.now = 31.0
    a.beat()
    # The database goes away for a moment (it takes no connection, and a's is ended):
    # a's beat fails.
    name = postgres_url.rsplit("/", 1)[1]
    pid = db_a.call(lambda c: c.execute("SELECT pg_backend_pid()").fetchone()[0])
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false")
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.OperationalError):
            a.beat()
        admin.execute(f"ALTER DATABASE {name} WITH ALLOW_CONNECTIONS true")
    clock.now = 40.0
    a.beat()  # back: steady again from now on
    with a.gone(b.token) as gone:
        assert not gone  # b's row ran out during the outage, but b has not had its chance
    clock.now = 71.0
    with a.gone(b.token) as gone:
        assert gone  # 31 s steady, and b still silent: gone for good
    for n, d in ((a, db_a), (b, db_b)):
        n.close()
        d.close()


def test_a_dropped_connection_is_opened_again_and_held_updates_go_through(
    db: PostgresDatabase, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ends callhook's session (a restart, a failover): the journal's updates
    are held while it is refused, and the connection is made again for them."""
    from callhook.store import journal as journal_module

    monkeypatch.setattr(journal_module, "RETRY_FIRST", 0.02)
    queued = threading.Event()
    journal = RecordingJournal(db, on_queued=queued.set)
    pid = db.call(lambda c: c.execute("SELECT pg_backend_pid()").fetchone()[0])
    with psycopg.connect(db.url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with caplog.at_level(logging.WARNING, "callhook.store"):
        journal.started(
            "app", "recordings/r.wav", encrypted=False, record_id="m",
            notify=("http://a/n", "POST"), body=BODY,
        ).result()  # fmt: skip
        journal.completed("app", "recordings/r.wav", {"filename": "recordings/r.wav"}).result()
        journal.durable("app", "recordings/r.wav", 800).result()
        assert queued.wait(10), "the held updates did not go through on a new connection"
    assert "connected again" in caplog.text
    assert db.call(lambda c: c.execute("SELECT COUNT(*) FROM notifications").fetchone()) == (1,)


def test_a_connection_left_mid_command_is_replaced_before_the_next_transaction(
    db: PostgresDatabase,
) -> None:
    """A statement the server ended (pg_terminate_backend while it ran) can leave libpq
    waiting for its answer, with psycopg not counting the connection as broken: the next
    BEGIN would fail with "another command is already in progress". The next transaction
    runs on a new connection."""

    def leave_mid_command() -> None:
        db._conn.pgconn.send_query(b"SELECT 1")  # its answer never read

    db._thread.submit(leave_mid_command).result()
    assert db.call(lambda c: c.execute("SELECT 2").fetchone()) == (2,)


def test_bindings_keep_their_order(db: PostgresDatabase) -> None:
    store = Bindings(db)
    far = 4e9

    def phone(user: str, contact: str) -> StoredBinding:
        return StoredBinding(user, contact, "c", 7, far, ("udp", "h", 1), ("udp", "h", 2))

    store.replace("bob", [phone("bob", "sip:c@x")])
    store.replace("alice", [phone("alice", "sip:b@x"), phone("alice", "sip:a@x")]).result()
    assert [b.contact for b in store.load(0)] == ["sip:c@x", "sip:b@x", "sip:a@x"]


def test_a_server_that_cannot_be_reached_is_named_without_its_password(
    postgres_server: Postgres,  # noqa: F811
) -> None:
    url = f"postgresql://callhook:hunter2@127.0.0.1:{postgres_server.port + 1}/callhook"
    with pytest.raises(ConfigError) as caught:
        connect(url)
    message = str(caught.value)
    assert message.startswith(f"[database] url postgresql://127.0.0.1:{postgres_server.port + 1}")
    assert "hunter2" not in message and ("refused" in message or "connect" in message)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('url = "mysql://x/y"', "must be a PostgreSQL URL"),
        ("node_timeout = 1", "node_timeout must be 3 to 3600"),
        ("nodes = 2", "unknown keys: nodes"),
        ('node_address = "db-1"', "node_address must be an IP address"),
        ('node_address = "0.0.0.0"', "not 0.0.0.0"),
        ("node_port = 80", "node_port must be 0"),
    ],
)
def test_database_settings_are_checked(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f"[database]\n{text}\n")
    with pytest.raises(ConfigError, match=error):
        load(path)


def test_database_settings(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[database]\nurl = "postgresql://u@db/callhook"\nnode_timeout = 10\n'
        'node_address = "10.0.0.5"\nnode_port = 5200\n'
    )
    settings: Any = load(path)
    assert (settings.database.url, settings.database.node_timeout) == (
        "postgresql://u@db/callhook",
        10,
    )
    assert (settings.database.node_address, settings.database.node_port) == ("10.0.0.5", 5200)
    path.write_text("")
    assert load(path).database.url is None  # SQLite, the embedded default


def test_each_node_finds_the_others_private_addresses(db: PostgresDatabase) -> None:
    a, b, c = steady_nodes(db, 3)
    a.advertise("http://10.0.0.5:41000")
    b.advertise("http://10.0.0.6:41000")
    assert a.peers() == [("http://10.0.0.6:41000", b.token)]  # not itself; c said nothing
    assert [api for api, _ in c.peers()] == ["http://10.0.0.5:41000", "http://10.0.0.6:41000"]
    expire(db, b)
    assert c.peers() == [("http://10.0.0.5:41000", a.token)]  # a silent node is not asked
    with c.gone(b.token) as gone:
        assert gone
    b.beat()  # b was only slow: back with its address, asked again
    assert [api for api, _ in c.peers()] == ["http://10.0.0.5:41000", "http://10.0.0.6:41000"]


def test_one_candidate_holds_the_trunks_role_until_it_is_gone_or_stops(
    postgres_url: str,  # noqa: F811
) -> None:
    dbs = [PostgresDatabase(postgres_url) for _ in range(3)]
    a, b, c = (steady_nodes(d, 1)[0] for d in dbs)
    assert not c.candidate and not c.leading  # (a node that does not stand never holds it)
    assert a.stand() is True
    assert b.stand() is False
    b.beat()
    a.beat()
    assert (a.leading, b.leading) == (True, False)
    expire(dbs[0], a)  # A was killed: its row ran out
    b.beat()
    assert b.leading
    a.beat()  # A's late beat: the role is B's now
    assert not a.leading
    b.close()  # a clean stop lets the role go at once
    a.beat()
    assert a.leading
    c.beat()
    assert not c.leading
    a.close()
    c.close()
    for d in dbs:
        d.close()


def test_a_node_cut_off_from_the_server_keeps_the_role_until_a_beat_says_otherwise(
    postgres_url: str,  # noqa: F811
) -> None:
    """Cut off, a holder goes on registering (two bindings for a while beat none); back,
    its first beat finds the role taken, and it lets go. A clean stop resigns at once."""
    clock = Clock()
    dbs = [PostgresDatabase(postgres_url) for _ in range(2)]
    node, other = Nodes(dbs[0], 30, clock=clock), Nodes(dbs[1], 30, clock=clock)
    assert node.stand() and not other.stand()

    def away(fn: object) -> None:
        raise psycopg.OperationalError("connection refused")

    reachable = dbs[0].call
    dbs[0].call = away  # type: ignore[method-assign,assignment]  # (its server is away)
    clock.now += 60
    with pytest.raises(psycopg.OperationalError):
        node.beat()
    assert node.leading
    expire(dbs[1], node)  # its row ran out meanwhile: the other takes the role
    other.beat()
    assert other.leading
    dbs[0].call = reachable  # type: ignore[method-assign]
    node.beat()
    assert not node.leading
    other.resign()  # a clean stop: the role is free at once, for the next beat
    assert not other.leading and not other.candidate
    node.beat()
    assert node.leading
    node.close()
    other.close()
    for d in dbs:
        d.close()
