"""The registered phones kept in the state database (callhook/store/bindings.py): they
survive closing and opening the database again (a restart); expired ones are dropped."""

from __future__ import annotations

from pathlib import Path

from callhook.store.bindings import Bindings, StoredBinding
from callhook.store.database import Database

NOW = 1_800_000_000.0


def phone(user: str, contact: str, expires: float) -> StoredBinding:
    return StoredBinding(
        user,
        contact,
        f"{contact}-call",
        7,
        expires,
        ("udp", "192.0.2.10", 5062),
        ("udp", "192.0.2.10", 5070),
    )


def test_bindings_survive_a_restart_and_expired_ones_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    db = Database(path)
    store = Bindings(db)
    store.replace(
        "alice", [phone("alice", "sip:a@x", NOW + 60), phone("alice", "sip:b@x", NOW + 5)]
    )
    store.replace("bob", [phone("bob", "sip:c@x", NOW + 60)]).result()
    db.close()
    again = Database(path)  # another process, later
    loaded = Bindings(again).load(NOW + 10)
    assert loaded == [phone("alice", "sip:a@x", NOW + 60), phone("bob", "sip:c@x", NOW + 60)]
    remaining = again.call(lambda conn: conn.execute("SELECT COUNT(*) FROM bindings").fetchone())
    assert remaining == (2,)  # the expired one was deleted, not just skipped
    again.close()


def test_a_change_replaces_all_of_a_users_bindings(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.sqlite3")
    store = Bindings(db)
    store.replace("alice", [phone("alice", "sip:a@x", NOW + 60)])
    store.replace("bob", [phone("bob", "sip:c@x", NOW + 60)])
    store.replace("alice", [phone("alice", "sip:b@x", NOW + 90)]).result()
    assert [b.contact for b in store.load(NOW)] == ["sip:c@x", "sip:b@x"]
    store.replace("alice", []).result()  # Contact: *
    assert [b.user for b in store.load(NOW)] == ["bob"]
    db.close()
