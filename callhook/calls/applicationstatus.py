"""Aculab's *Application Status* of an application instance, read from its call log. Pure.

Aculab's web service answers ``adr`` (the application data record), ``cdrs`` (its
calls' records) and ``errs`` (its error reports). callhook keeps every instance's
call log (``logs/<application_instance_id>.log``), which says all of it: when the
call started and ended, who called whom, why it ended, and every error. The records
are read from those lines (:mod:`callhook.calls.calllog` writes them); the costs Aculab
reports are all zero here (a self-hosted server bills nothing).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from callhook.store.callrecords import CallRecord

_LINE = re.compile(r"(\S+) \+(\d+\.\d+) (\w+) ?(.*)")
_QUOTED = r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
_START = re.compile(
    rf"(inbound|outbound) call (\S+)(?: from {_QUOTED})? to {_QUOTED}(?:, application {_QUOTED})?"
)
_END = re.compile(r"call_cause=(\S*) call_raw_cause=(\S*)")


def aculab_datetime(seconds: float) -> str:
    """``YYYY-MM-DD_hh:mm:ss`` in UTC: the form of Aculab's web services."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d_%H:%M:%S")


def _epoch(stamp: str) -> float | None:
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _text(quoted: str | None) -> str:
    if quoted is None:
        return ""
    try:
        value = ast.literal_eval(quoted)
    except (ValueError, SyntaxError):
        return quoted
    return value if isinstance(value, str) else quoted


@dataclass
class InstanceStatus:
    """What an instance's call log says (see :func:`read`)."""

    instance_id: str
    application: str
    call_id: str = ""
    direction: str = ""
    call_from: str = ""
    call_to: str = ""
    start: float | None = None
    stop: float | None = None  # None: the call has not ended (yet)
    last: float | None = None  # the log's last line
    cause: str = ""
    raw_cause: str = ""
    answered: bool = False
    errors: list[tuple[float, str]] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.stop is None

    def as_aculab(self) -> dict[str, Any]:
        """Aculab's answer: ``{"adr": {...}, "cdrs": [...], "errs": [...]}``."""
        start = self.start or 0.0
        stop = self.stop
        end = stop if stop is not None else (self.last or start)
        adr: dict[str, Any] = {
            "application_instance_id": self.instance_id,
            "application_name": self.application,
            "start_time": start,
            "start_datetime": aculab_datetime(start),
            "stop_time": stop,
            "stop_datetime": aculab_datetime(stop) if stop is not None else None,
            "duration": round(end - start, 1),
            "tts_seconds": 0.0,
            "tts_unit_cost": 0.0,
            "extra_channel_count": 0,
            "fax": "false",
            "platform_cost": 0.0,
            "extra_cost": 0.0,
            "pstn_cost": 0.0,
            "total_cost": 0.0,
            "costs_valid": "true",
            "status": 0 if self.cause in ("", "completed", "hung_up") else 1,
        }
        cdrs = []
        if self.call_id:
            cdr: dict[str, Any] = {
                "call_id": self.call_id,
                "call_direction": self.direction,
                "call_from": self.call_from,
                "call_to": self.call_to,
                "start_time": start,
                "start_datetime": aculab_datetime(start),
                "stop_time": stop,
                "stop_datetime": aculab_datetime(stop) if stop is not None else None,
                "duration": round(end - start, 1),
                "call_cause": self.cause,
                "call_raw_cause": self.raw_cause,
            }
            cdrs.append(cdr)
        errs = [
            {"time": t, "datetime": aculab_datetime(t), "description": text}
            for t, text in self.errors
        ]
        return {"adr": adr, "cdrs": cdrs, "errs": errs}


def from_record(record: CallRecord) -> InstanceStatus:
    """The status of an instance whose call log is gone (deleted past its retention),
    from its call record: the call, its times and cause, without the errors the log
    held."""
    return InstanceStatus(
        record.instance_id,
        record.app,
        call_id=record.call_id,
        direction=record.direction,
        call_from=record.call_from,
        call_to=record.call_to,
        start=record.started,
        stop=record.ended,
        last=record.ended,
        cause=record.cause,
        raw_cause=record.raw_cause,
        answered=record.answered is not None,
    )


def read(instance_id: str, application: str, log: str) -> InstanceStatus:
    """The status of instance ``instance_id`` of ``application`` from its call log's text."""
    status = InstanceStatus(instance_id, application)
    for line in log.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        when = _epoch(match.group(1))
        kind, text = match.group(3), match.group(4)
        if when is None:
            continue
        if status.start is None:
            status.start = when
        status.last = when
        if kind == "call_start":
            start = _START.match(text)
            if start is not None:
                status.direction = "in" if start.group(1) == "inbound" else "out"
                status.call_id = start.group(2)
                status.call_from = _text(start.group(3))
                status.call_to = _text(start.group(4))
                if start.group(5):
                    status.application = _text(start.group(5))
        elif kind == "call_end":
            end = _END.match(text)
            if end is not None:
                status.cause, status.raw_cause = end.group(1), end.group(2)
            status.stop = when
        elif kind == "error":
            status.errors.append((when, text))
    return status
