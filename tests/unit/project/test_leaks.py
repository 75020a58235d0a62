"""The end-of-session secrets check (tests/leaks.py) finds what it must. Its files live
outside the session's temporary directory, or the session check would find them too."""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests import leaks


def test_a_secret_in_a_serve_output_or_a_call_log_is_found() -> None:
    with tempfile.TemporaryDirectory() as name:
        base = Path(name)
        (base / "t1" / "data" / "media" / "app" / "logs").mkdir(parents=True)
        (base / "t1" / "data" / "secret").write_text("installation-secret-value\n")
        (base / "t1" / "callhook.toml").write_text(
            '[apps.a]\napi_key = "an-api-key-0123456789"\n[trunks.p]\npassword = "pw-letmein"\n'
        )
        out = base / "t1" / "serve-5060.out"
        out.write_text("INFO callhook: serving\n")
        call_log = base / "t1" / "data" / "media" / "app" / "logs" / "c.log"
        call_log.write_text("call_start\n")
        assert leaks.leaks(base) == []
        out.write_text("WARNING: key an-api-key-0123456789 refused\n")
        call_log.write_text("trunk password pw-letmein; secret installation-secret-value\n")
        leaks.used("a-declared-cipher-key")
        (base / "t1" / leaks.INPROCESS_LOG).write_text("ERROR a-declared-cipher-key\n")
        assert sorted(leaks.leaks(base)) == [
            "t1/callhook-inprocess.log: a-de...",
            "t1/data/media/app/logs/c.log: inst...",
            "t1/data/media/app/logs/c.log: pw-l...",
            "t1/serve-5060.out: an-a...",
        ]
        leaks.SECRETS.discard("a-declared-cipher-key")
