"""A room across processes: which worker holds it, and its messages in JSON. Sans-IO.

Every participant of a room is mixed on one process. With ``serve --workers N`` (or
nodes sharing a database) a room is held by one process, the same one for every caller
whatever process their call came to: :func:`owner` picks it from the application's and
the room's names and the processes' labels alone, by rendezvous hashing (each process
scores a BLAKE2 hash of the names and its label; the highest holds the room; a CRC is
linear, and would give one process most rooms). The score is the same in every process
(Python's own ``hash`` of a string differs from process to process), and a process
coming or going moves only the rooms it would hold.
A participant whose call is on another worker takes part from there: what its action asks
(:class:`~callhook.events.JoinRoom`, :class:`~callhook.events.RoomDigit`,
:class:`~callhook.events.LeaveRoom`) goes to the owner, and what the room says back (the
room events) comes to its action, each as one JSON object with a ``type``. This module
writes and reads those objects; a message that is not one of them is a :class:`WireError`
naming what is wrong.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from callhook.events import (
    JoinRoom,
    LeaveRoom,
    ParticipantOptions,
    PlayDigits,
    PlayFile,
    PlayTone,
    PlayUrl,
    PromptItem,
    RoomDigit,
    RoomHolding,
    RoomJoined,
    RoomLeft,
    RoomPrompt,
    RoomRefused,
    SayText,
)

RoomCommand = JoinRoom | RoomDigit | LeaveRoom
#: A process among those that may hold rooms: a worker's index, or a node's address.
Label = int | str
RoomEvent = RoomJoined | RoomRefused | RoomHolding | RoomPrompt | RoomLeft


class WireError(ValueError):
    """A message that is not a room's command or event (what is wrong with it)."""


def owner(app: str, room: str, members: Iterable[Label]) -> Label:
    """Which of ``members`` (the processes' labels: a worker's index, a node's address)
    holds application ``app``'s room ``room``."""
    name = f"{app}\x00{room}\x00".encode()

    def score(label: Label) -> bytes:
        return hashlib.blake2b(name + str(label).encode(), digest_size=8).digest()

    best = max(members, key=score, default=None)
    if best is None:
        raise ValueError("no process to hold the room")
    return best


# --- writing ---------------------------------------------------------------------------------


def command_message(command: RoomCommand) -> dict[str, Any]:
    """``command`` as a JSON object."""
    if isinstance(command, JoinRoom):
        o = command.options
        return {
            "type": "join",
            "room": command.room,
            "options": {
                "talker": o.talker,
                "start_on_entry": o.start_on_entry,
                "destroy_on_exit": o.destroy_on_exit,
                "beep_on_entry": o.beep_on_entry,
                "exit_digit": o.exit_digit,
                "mute_digit": o.mute_digit,
                "unmute_digit": o.unmute_digit,
            },
            "joined": [_item(i) for i in command.joined],
            "left": [_item(i) for i in command.left],
        }
    if isinstance(command, RoomDigit):
        return {"type": "digit", "digit": command.digit}
    return {"type": "leave"}


def event_message(event: RoomEvent) -> dict[str, Any]:
    """``event`` as a JSON object."""
    if isinstance(event, RoomJoined):
        return {"type": "joined"}
    if isinstance(event, RoomRefused):
        return {"type": "refused", "cause": event.cause, "raw_cause": event.raw_cause}
    if isinstance(event, RoomHolding):
        return {"type": "holding", "on": event.on}
    if isinstance(event, RoomPrompt):
        return {"type": "prompt", "items": [_item(i) for i in event.items]}
    return {"type": "left", "reason": event.reason, "seconds": event.seconds}


def _item(item: PromptItem) -> dict[str, Any]:
    if isinstance(item, SayText):
        return {
            "say": item.text,
            "voice": item.voice,
            "private": item.private,
            "language": item.language,
        }
    if isinstance(item, PlayFile):
        # (The cipher's key goes to the other worker only: the workers' own link.)
        return {"file": item.name, "cipher": list(item.cipher) if item.cipher else None}
    if isinstance(item, PlayTone):
        return {"tone": item.frequency_hz, "seconds": item.seconds, "and_hz": item.and_hz}
    if isinstance(item, PlayDigits):
        return {"digits": item.digits}
    return {"url": item.url}


# --- reading ---------------------------------------------------------------------------------


def read_command(message: object) -> RoomCommand:
    """The command ``message`` (a decoded JSON value) is; :class:`WireError` if none."""
    kind = _type(message)
    assert isinstance(message, dict)
    if kind == "join":
        options = _field(message, "options", dict)
        try:
            parsed = ParticipantOptions(
                talker=_field(options, "talker", bool),
                start_on_entry=_field(options, "start_on_entry", bool),
                destroy_on_exit=_field(options, "destroy_on_exit", bool),
                beep_on_entry=_field(options, "beep_on_entry", bool),
                exit_digit=_field(options, "exit_digit", str),
                mute_digit=_field(options, "mute_digit", str),
                unmute_digit=_field(options, "unmute_digit", str),
            )
        except ValueError as exc:  # (a digit that is none)
            raise WireError(f"join: {exc}") from None
        return JoinRoom(
            _field(message, "room", str),
            parsed,
            joined=_items(_field(message, "joined", list)),
            left=_items(_field(message, "left", list)),
        )
    if kind == "digit":
        return RoomDigit(_field(message, "digit", str))
    if kind == "leave":
        return LeaveRoom()
    raise WireError(f"not a room command: type {kind!r}")


def read_event(message: object) -> RoomEvent:
    """The room event ``message`` (a decoded JSON value) is; :class:`WireError` if none."""
    kind = _type(message)
    assert isinstance(message, dict)
    if kind == "joined":
        return RoomJoined()
    if kind == "refused":
        return RoomRefused(_field(message, "cause", str), _field(message, "raw_cause", str))
    if kind == "holding":
        return RoomHolding(_field(message, "on", bool))
    if kind == "prompt":
        return RoomPrompt(_items(_field(message, "items", list)))
    if kind == "left":
        return RoomLeft(_field(message, "reason", str), _number(message, "seconds"))
    raise WireError(f"not a room event: type {kind!r}")


def _type(message: object) -> str:
    if not isinstance(message, dict):
        raise WireError(f"a room message is a JSON object, not {type(message).__name__}")
    kind = message.get("type")
    if not isinstance(kind, str):
        raise WireError("a room message has a string 'type'")
    return kind


def _field(message: dict[str, Any], name: str, kind: type[Any]) -> Any:
    value = message.get(name)
    # (bool is an int in Python, and JSON's true is no number: each is only itself here.)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise WireError(f"{name!r}: expected {kind.__name__}, got {value!r}")
    return value


def _number(message: dict[str, Any], name: str) -> float:
    value = message.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"{name!r}: expected a number, got {value!r}")
    return float(value)


def _optional(message: dict[str, Any], name: str, kind: type[Any]) -> Any:
    return None if message.get(name) is None else _field(message, name, kind)


def _items(raw: list[Any]) -> tuple[PromptItem, ...]:
    items: list[PromptItem] = []
    for entry in raw:
        if not isinstance(entry, dict):
            raise WireError(f"a prompt item is a JSON object, not {entry!r}")
        if "say" in entry:
            items.append(
                SayText(
                    _field(entry, "say", str),
                    _optional(entry, "voice", str),
                    _field(entry, "private", bool),
                    _optional(entry, "language", str),
                )
            )
        elif "file" in entry:
            cipher = _optional(entry, "cipher", list)
            if cipher is not None and (
                len(cipher) != 3 or not all(isinstance(c, str) for c in cipher)
            ):
                raise WireError("'cipher': expected [type, key, iv]")
            items.append(PlayFile(_field(entry, "file", str), tuple(cipher) if cipher else None))
        elif "tone" in entry:
            and_hz = None if entry.get("and_hz") is None else _number(entry, "and_hz")
            items.append(PlayTone(_number(entry, "tone"), _number(entry, "seconds"), and_hz))
        elif "digits" in entry:
            items.append(PlayDigits(_field(entry, "digits", str)))
        elif "url" in entry:
            items.append(PlayUrl(_field(entry, "url", str)))
        else:
            raise WireError(f"not a prompt item: {sorted(entry)}")
    return tuple(items)
