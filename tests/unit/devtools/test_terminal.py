"""The terminal phone's printing (callhook/devtools/terminal.py): each error once."""

from __future__ import annotations

import io
import logging
import os

import pytest

from callhook.calls.calllog import CallLog
from callhook.devtools.harness import VirtualClock
from callhook.devtools.terminal import Keyboard, ShownOnTerminal, TerminalLeg, log_printer
from callhook.media.simulated import PromptTimer
from callhook.ports import CallInfo

URL = "http://127.0.0.1:5000/start"
PROBLEMS = (
    "$.actions[0].get_number.next_page: required property is missing",
    "$.actions[0].get_number.digit_count: input should be less than or equal to 32, got 40",
)


async def _terminal() -> tuple[TerminalLeg, io.StringIO]:
    out = io.StringIO()
    leg = TerminalLeg(
        out,
        info=CallInfo("terminal-1"),
        timer=PromptTimer(),
        save_recording=lambda command, seconds: seconds,
        clock=VirtualClock(),
    )
    return leg, out


async def test_an_invalid_page_s_problems_are_printed_once() -> None:
    leg, out = await _terminal()
    log = CallLog("inst-1", VirtualClock())
    log.listeners.append(log_printer(leg))
    for problem in PROBLEMS:
        log.write("invalid_response", f"{URL}: {problem}", level=logging.ERROR)
    log.write("error", f"invalid: {URL}: {'; '.join(PROBLEMS)}", level=logging.ERROR)
    log.write("error", f"status: {URL}: HTTP 500 Internal Server Error: down")
    lines = [line.partition("] ")[2] for line in out.getvalue().splitlines()]
    assert lines == [
        f"!! {URL}: {PROBLEMS[0]}",
        f"!! {URL}: {PROBLEMS[1]}",
        f"!! the page {URL} answered no valid action list (above)",
        f"!! status: {URL}: HTTP 500 Internal Server Error: down",
    ]


def test_the_server_log_leaves_out_the_lines_the_terminal_shows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = CallLog("inst-2", VirtualClock())
    shown = ShownOnTerminal()
    calls = logging.getLogger("callhook.call")
    calls.addFilter(shown)
    try:
        with caplog.at_level(logging.WARNING, logger="callhook.call"):
            log.write("error", f"status: {URL}: HTTP 500", level=logging.ERROR)
            log.write("invalid_response", f"{URL}: {PROBLEMS[0]}", level=logging.ERROR)
            log.write("aborted", "callhook is shutting down", level=logging.WARNING)
            calls.error("[%s] call log %s cannot be opened: %s", "inst-2", "x.log", "full")
    finally:
        calls.removeFilter(shown)
    assert [r.getMessage() for r in caplog.records] == [
        "[inst-2] aborted callhook is shutting down",  # not shown on the terminal: kept
        "[inst-2] call log x.log cannot be opened: full",
    ]


async def test_the_keyboard_keeps_the_shown_lines_out_of_the_server_log_while_attached(
    caplog: pytest.LogCaptureFixture,
) -> None:
    leg, _ = await _terminal()
    read, write = os.pipe()
    try:
        with os.fdopen(read, closefd=False) as stream, caplog.at_level(logging.ERROR):
            log = CallLog("inst-3", VirtualClock())
            with Keyboard(leg, stream).attached():
                log.write("error", "during the call", level=logging.ERROR)
            log.write("error", "after it", level=logging.ERROR)
    finally:
        os.close(read)
        os.close(write)
    assert [r.getMessage() for r in caplog.records] == ["[inst-3] error after it"]
