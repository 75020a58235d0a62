"""What every action state machine has in common.

Theory of operation
-------------------
An action that takes time on the call (``play``, ``get_number``,
``get_input``, ``record``, ``sleep``) is an :class:`ActionMachine`. It does no
IO and never awaits: the call runner (``callhook.calls.runner``) drives it with

* ``start(now)`` once,
* ``handle(event, now)`` for each media event of the call,
* ``on_deadline(now)`` when the time it asked for (``deadline``) has come,
* ``stop(now, why)`` if the call ends (or the runner aborts) first,

and ``timers()`` tells which of its timers are running (name, start, expiry):
the call log records them, so a call's picture shows why the action ended when
it did (``deadline`` is the earliest expiry of those timers).

and each of them returns the media commands to carry out, in order. When the
action is over, ``outcome`` is set: :class:`Completed` (request the action's
``next_page`` with an ``action_result``) or :class:`Continue` (run the next
action of the list). Times are the call's media time in seconds.

The per-call :class:`InputBuffer` outlives the actions: digits and a phrase
heard during a barge-in ``play`` (and digits typed ahead while the runner
fetches a page) wait there for the next ``get_number`` / ``get_input``
(docs/behaviour.md, "Input between actions").
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple
from urllib.parse import urljoin

from callhook.actions.schema import (
    DigitsItem,
    FileItem,
    MediaPageRequest,
    MessagePlay,
    Play,
    TextItem,
    WebPageRequest,
)
from callhook.events import (
    MediaCommand,
    MediaEvent,
    Phrase,
    PlayDigits,
    PlayFile,
    PlayUrl,
    PromptFinished,
    PromptItem,
    SayText,
    StartPrompt,
    StopPrompt,
)


@dataclass(frozen=True, slots=True)
class Completed:
    """The action completed: request its ``next_page`` with this ``action_result``.

    ``page``: the page to request instead of the action's ``next_page`` (a menu's
    chosen option has its own).
    """

    action: str
    result: dict[str, Any]
    page: WebPageRequest | None = None

    def action_result(self) -> dict[str, Any]:
        return {"action": self.action, "result": self.result}


@dataclass(frozen=True, slots=True)
class Continue:
    """The action is over without a result for the application: run the next action."""

    reason: str


Outcome = Completed | Continue
StopReason = Literal["hangup", "aborted"]


@dataclass
class InputBuffer:
    """Input heard before an input action asked for it (docs/behaviour.md, "Input between
    actions")."""

    digits: str = ""
    phrases: list[Phrase] = field(default_factory=list)

    def clear(self) -> None:
        self.digits = ""
        self.phrases.clear()

    def take_digits(self) -> str:
        digits, self.digits = self.digits, ""
        return digits

    def take_phrases(self) -> list[Phrase]:
        phrases, self.phrases = self.phrases, []
        return phrases


@dataclass
class ActionContext:
    """What a call gives its actions: the input buffer and a few call facts."""

    buffer: InputBuffer = field(default_factory=InputBuffer)
    # Whether the caller is making sound right now (the last VoiceActivity seen).
    voice_active: bool = False
    # Name for the next recording in the media file store.
    new_recording_name: Callable[[], str] = lambda: "recording.wav"
    # Why no recording may begin now (the disk's free-space floor), or None: one may.
    recording_refused: Callable[[], str | None] = lambda: None
    # The URL of the page whose action list is running (relative media URLs resolve to it).
    page_url: str = ""
    # The confidence floor of answers to word hints (``[speech] min_confidence``, or the
    # application's): one under it is not understood and the caller is asked again.
    min_confidence: float = 0.0
    _prompt_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def new_prompt_id(self) -> int:
        """A prompt id unique within the call, so a late PromptFinished is never mistaken."""
        return next(self._prompt_ids)


def prompt_items(
    play: Play, language: str | None = None, page_url: str = ""
) -> tuple[PromptItem, ...]:
    """The media items of a ``play`` action's play list.

    ``language``: the action's (it picks the TTS voice); ``page_url``: the page that
    returned the action, against which a relative ``file_to_play`` URL is resolved.
    """
    items: list[PromptItem] = []
    for item in play.play_list:
        if isinstance(item, TextItem):
            items.append(SayText(item.text_to_say, item.tts_voice, item.text_is_private, language))
        elif isinstance(item, FileItem):
            source = item.file_to_play
            if isinstance(source, MediaPageRequest):
                items.append(PlayUrl(urljoin(page_url, source.url)))
                continue
            cipher = item.decryption_cipher.as_tuple() if item.decryption_cipher else None
            items.append(PlayFile(source, cipher))
        elif isinstance(item, DigitsItem):
            items.append(PlayDigits(item.digits_to_play))
    return tuple(items)


def messages_or(given: Sequence[Play] | None, default: tuple[Play, ...]) -> tuple[Play, ...]:
    """An action's ``on_*_messages``, or ``default`` when it gave none (``[]`` is none at all)."""
    return tuple(given) if given is not None else default


class State(enum.Enum):
    """Where an input action (gather, menu) is: prompting, waiting, retrying, or done."""

    PROMPT = "prompt"
    WAIT = "wait"
    MESSAGE = "message"
    DONE = "done"


def say(*texts: str) -> tuple[Play, ...]:
    """Spoken messages as play actions (for the default retry messages)."""
    return tuple(MessagePlay(play_list=[TextItem(text_to_say=t)]) for t in texts)


class Prompter:
    """Plays one prompt at a time for a machine and recognises its PromptFinished."""

    def __init__(self, ctx: ActionContext, language: str | None = None) -> None:
        self._ctx = ctx
        self.language = language  # of the speech options of the action, for the TTS voice
        self.playing: int | None = None
        self.barge_in_on_digit = False

    def start(
        self, play: Play | None = None, items: tuple[PromptItem, ...] = ()
    ) -> list[MediaCommand]:
        prompt_id = self._ctx.new_prompt_id()
        self.playing = prompt_id
        self.barge_in_on_digit = play.barge_in_on_digit if play else False
        if play is not None:
            items = prompt_items(play, self.language, self._ctx.page_url)
        return [StartPrompt(prompt_id, items)]

    def stop(self) -> list[MediaCommand]:
        if self.playing is None:
            return []
        prompt_id, self.playing = self.playing, None
        return [StopPrompt(prompt_id)]

    def finished(self, event: MediaEvent) -> bool:
        """Whether ``event`` says the current prompt ended (and forget it if so)."""
        if isinstance(event, PromptFinished) and event.prompt_id == self.playing:
            self.playing = None
            return True
        return False


class Timer(NamedTuple):
    """A running timer of an action: its name (``initial``, ``inter-digit``, ...), when it
    started and when it expires, in media time."""

    name: str
    started: float
    expires: float


def earliest(timers: Sequence[Timer]) -> float | None:
    """The first expiry of ``timers`` (None: none is running)."""
    return min((t.expires for t in timers), default=None)


class ActionMachine:
    """Base of the sans-IO action state machines (see the module docstring)."""

    #: Set when the action is over.
    outcome: Outcome | None = None

    def start(self, now: float) -> list[MediaCommand]:
        raise NotImplementedError

    def handle(self, event: MediaEvent, now: float) -> list[MediaCommand]:
        raise NotImplementedError

    @property
    def deadline(self) -> float | None:
        """When ``on_deadline`` must be called, or None to wait for events only."""
        return None

    def on_deadline(self, now: float) -> list[MediaCommand]:
        return []

    def timers(self) -> tuple[Timer, ...]:
        """The timers running now (for the call's log and picture; none by default)."""
        return ()

    def stop(self, now: float, why: StopReason) -> list[MediaCommand]:
        """The call ended (``hangup``) or the runner gave up on the action (``aborted``)."""
        raise NotImplementedError
