"""A state file from an older callhook opens: the columns added since are added, its
rows kept (their new columns empty), and the new tables made."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from callhook.store.database import Database


def test_an_older_state_file_gets_the_new_columns_and_tables(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(
        """
        CREATE TABLE recordings (app TEXT NOT NULL, filename TEXT NOT NULL, started REAL
          NOT NULL, encrypted INTEGER NOT NULL, record_id TEXT NOT NULL, notify_url TEXT,
          notify_method TEXT, body TEXT NOT NULL, result TEXT, length INTEGER,
          PRIMARY KEY (app, filename));
        CREATE TABLE notifications (id INTEGER PRIMARY KEY AUTOINCREMENT, app TEXT NOT NULL,
          url TEXT NOT NULL, method TEXT NOT NULL, body TEXT NOT NULL, created REAL NOT NULL,
          due REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT,
          abandoned INTEGER NOT NULL DEFAULT 0);
        INSERT INTO recordings VALUES ('a', 'recordings/r.wav', 1, 0, '', NULL, NULL, '{}',
          NULL, NULL);
        INSERT INTO notifications (app, url, method, body, created, due)
          VALUES ('a', 'http://a/n', 'POST', '{}', 1, 1);
        """
    )
    old.commit()
    old.close()
    db = Database(path)
    try:

        def columns(table: str) -> set[str]:
            rows = db.call(lambda c: c.execute(f"PRAGMA table_info({table})").fetchall())
            return {row[1] for row in rows}

        assert {"owner", "traceparent"} <= columns("recordings")
        assert {"traceparent", "stream"} <= columns("notifications")
        indexes = db.call(lambda c: c.execute("PRAGMA index_list(notifications)").fetchall())
        assert "notifications_stream" in {row[1] for row in indexes}
        tables = db.call(
            lambda c: c.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        )
        assert {"call_records", "deletions"} <= {name for (name,) in tables}
        kept = db.call(lambda c: c.execute("SELECT traceparent FROM notifications").fetchall())
        assert kept == [(None,)]
    finally:
        db.close()
