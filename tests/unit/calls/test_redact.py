"""Passwords in URLs never reach a log (callhook/redact.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from callhook.calls.calllog import CallLog
from callhook.clock import MonotonicClock
from callhook.redact import Redacting, redact


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "POST https://ivr:hunter2@app.example/start (first)",
            "POST https://ivr:***@app.example/start (first)",
        ),
        ("http://a:b@h/x and http://c:d@h/y", "http://a:***@h/x and http://c:***@h/y"),
        ("https://user@app.example/x", "https://user@app.example/x"),  # no password
        ("sip:alice@192.0.2.1:5060", "sip:alice@192.0.2.1:5060"),  # not a URL with userinfo
        ("https://app.example/a?to=x@y:z", "https://app.example/a?to=x@y:z"),
        ("no url at all", "no url at all"),
        ("https://user:p@ss@host/x", "https://user:***@host/x"),  # an @ in the password
        ("<sip:bob:pw1234@pbx.example;transport=tcp>", "<sip:bob:***@pbx.example;transport=tcp>"),
        ("Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9", "Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9"),
    ],
)
def test_passwords_in_urls_are_replaced(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_the_call_log_and_the_server_log_redact() -> None:
    log = CallLog("abc", MonotonicClock())
    log.write("error", "unreachable: https://ivr:hunter2@app.example/start: refused")
    assert log.lines[-1].endswith("error unreachable: https://ivr:***@app.example/start: refused")
    record = logging.LogRecord(
        "callhook.pages",
        logging.INFO,
        __file__,
        1,
        "page %s refused",
        ("http://u:pw1234@h/",),
        None,
    )
    assert Redacting().filter(record)
    assert record.getMessage() == "page http://u:***@h/ refused"


def test_a_traceback_is_redacted_too() -> None:
    try:
        raise ValueError("cannot fetch https://ivr:hunter2@app.example/start")
    except ValueError:
        import sys

        record = logging.LogRecord(
            "callhook.pages", logging.ERROR, __file__, 1, "failed", None, sys.exc_info()
        )
    assert Redacting().filter(record)
    text = logging.Formatter().format(record)
    assert "hunter2" not in text and "https://ivr:***@app.example/start" in text


def test_a_caller_text_that_was_not_utf8_is_written_escaped_and_kept(tmp_path: Path) -> None:
    """The SIP parser keeps bytes that are not UTF-8 as surrogates; the call log writes
    them escaped (the line was once lost with the call: encoding it raised)."""
    path = tmp_path / "call.log"
    log = CallLog("abc", MonotonicClock(), path)
    text = b"from 'sip:jos\xff@192.0.2.1'".decode("utf-8", "surrogateescape")
    log.write("call_start", text)
    log.write("call_end", "café")  # UTF-8 that is not ASCII stays as it is
    log.close()
    lines = path.read_bytes().decode("utf-8").splitlines()  # valid UTF-8
    assert lines[0].endswith("call_start from 'sip:jos\\udcff@192.0.2.1'")
    assert lines[1].endswith("call_end café")
    assert log.lines[0].endswith("\\udcff@192.0.2.1'")
