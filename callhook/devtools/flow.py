"""Call flows: what ``callhook test FLOW.yaml`` does to an application, and expects of it.

A flow file is YAML (JSON is YAML too)::

    name: PIN entry                      # optional: the file's name
    app: http://127.0.0.1:5000/start     # the first page, or "demo" (the built-in demo)
    secret: s3cret                       # the application's secret (a URL app)
    to: support                          # with --sip HOST:PORT: the user called (flow)
    final_page: http://127.0.0.1:5000/final     # optional, as is error_page
    timeout: 300                         # seconds of call time the whole flow may take
    steps:
      - hear: Enter your PIN             # wait until a prompt says it, and until it ends
      - press: "1234#"                   # key presses, 0.25 s apart (press: {digits, gap})
      - request: {page: /pin, action: get_number, result: {entered_number: "1234"}}
      - say: sales                       # words spoken by the TTS voice to the recogniser
      - play: words.wav                  # a recording spoken into the call (8 kHz or any)
      - noise: 1.5                       # sound that is not speech, for this long
      - wait: 2                          # let call time pass
      - hang_up                          # the caller hangs up
      - ended: completed                 # the call is over, with this cause (any: "any")
    callees:                             # in-process: the far ends a connect calls
      "sip:sales@*": {rings: 2, talks: 5}       # answers after 2 s, hangs up 5 s later
      "+44*": {outcome: busy}                   # answer (default), busy, no_answer, ...

Steps run in order. ``hear`` and ``request`` wait for what they name (it may already
have happened since the step before); the call ending first, or the flow's ``timeout``,
fails them. ``press``, ``say``, ``play`` and ``noise`` happen at once and take their
time; the next step comes after them. After the last step the caller waits for the
application to end the call (or hangs up, when nothing more could happen).

``${NAME}`` and ``${NAME:-default}`` in a value are replaced by the environment's
``NAME``, so one flow runs against an app on whatever port CI gives it.

In process there is no network: the destinations a ``connect`` (or a ``transfer``'s
``fallback_connect``) calls behave as ``callees`` says, the first glob matching the
destination (``fnmatch``) deciding; a destination none matches is ``unobtainable``, as a
number nobody has. The caller refuses a ``transfer``'s REFER with 405, as callhook
test's user agent does over SIP (a phone that does not do REFER). With ``--sip`` the
destinations are real and ``callees`` is not used.

This module only reads and checks flow files; :mod:`callhook.devtools.flowcaller` runs
them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from callhook.actions.fields import DIGIT_CHARACTERS

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class FlowError(ValueError):
    """A flow file that cannot be run: not YAML, or not a flow (says where and why)."""


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Hear(_Step):
    """Wait until a prompt says ``text`` (case and spacing aside), then until it ends."""

    hear: Annotated[str, Field(min_length=1)]


class Press(_Step):
    """Press ``digits`` (0-9, *, #, A-D), one every ``gap`` seconds."""

    press: str
    gap: Annotated[float, Field(gt=0, le=10)] = 0.25

    @field_validator("press")
    @classmethod
    def _digits(cls, value: str) -> str:
        if not value or any(d not in DIGIT_CHARACTERS for d in value):
            raise ValueError(f"expected keys of {DIGIT_CHARACTERS}, got {value!r}")
        return value


class Say(_Step):
    """Say ``say``: spoken by the default TTS voice, heard by the recogniser."""

    say: Annotated[str, Field(min_length=1)]


class PlayWav(_Step):
    """Speak the recording ``play`` (a WAV file, relative to the flow file) into the call."""

    play: Annotated[str, Field(min_length=1)]


class Noise(_Step):
    """Make sound that is not speech for ``noise`` seconds."""

    noise: Annotated[float, Field(gt=0, le=600)]


class Wait(_Step):
    """Let ``wait`` seconds of call time pass."""

    wait: Annotated[float, Field(ge=0, le=3600)]


class Expected(BaseModel):
    """What a page request must be: its page, the action whose result it carries, and
    properties of that result (each given one must be there with that value)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    page: str | None = None
    action: str | None = None
    result: dict[str, Any] | None = None


class Request(_Step):
    """Wait until the application receives a page request as ``request`` says."""

    request: Expected


class HangUp(_Step):
    """The caller hangs up."""

    hang_up: None = None


class Ended(_Step):
    """The call ends (by itself or after the steps), with cause ``ended`` ("any": any)."""

    ended: str = "any"


Step = Hear | Press | Say | PlayWav | Noise | Wait | Request | HangUp | Ended
_STEPS: dict[str, type[_Step]] = {
    "hear": Hear,
    "press": Press,
    "say": Say,
    "play": PlayWav,
    "noise": Noise,
    "wait": Wait,
    "request": Request,
    "hang_up": HangUp,
    "ended": Ended,
}


class Callee(BaseModel):
    """How a far end a connect calls behaves, in process: it rings for ``rings`` seconds,
    then answers (``outcome`` ``answer``) or fails with that cause; once answered, it
    hangs up after ``talks`` seconds (None: it stays until the caller's side ends)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rings: Annotated[float, Field(ge=0, le=3600)] = 1.0
    outcome: Literal["answer", "busy", "no_answer", "unobtainable", "failed"] = "answer"
    talks: Annotated[float, Field(ge=0, le=86400)] | None = None


class Flow(BaseModel):
    """One call flow (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    app: Annotated[str, Field(min_length=1)] = "demo"
    secret: str | None = None
    error_page: str | None = None
    final_page: str | None = None
    application_parameters: str = ""
    call_from: str = "sip:flow@127.0.0.1"
    #: The user called with ``--sip HOST:PORT`` (serve's routing picks the application).
    to: Annotated[str, Field(pattern=r"^[A-Za-z0-9\-_.!~*'()&=+$,;?/]{1,64}$")] = "flow"
    timeout: Annotated[float, Field(gt=0, le=86400)] = 300.0
    steps: list[Step] = Field(default_factory=list)
    #: In process: how the destinations a connect calls behave (glob -> behaviour).
    callees: dict[str, Callee] = Field(default_factory=dict)
    #: The flow file's folder (``play`` files are found there).
    folder: Path = Path()

    @field_validator("app")
    @classmethod
    def _app(cls, value: str) -> str:
        if value != "demo" and not re.match(r"https?://", value):
            raise ValueError(f"expected demo or an http(s) URL, got {value!r}")
        return value


def describe(step: Step) -> str:
    """A step as the flow file wrote it, for messages: ``press '1234'``."""
    if isinstance(step, HangUp):
        return "hang_up"
    data = step.model_dump(exclude_defaults=False)
    key = next(k for k in data if k in _STEPS)
    value = data[key]
    if isinstance(value, dict):
        shown = ", ".join(f"{k}: {v!r}" for k, v in value.items() if v is not None)
        return f"{key} {{{shown}}}"
    return f"{key} {value!r}"


def _substitute(node: Any) -> Any:
    if isinstance(node, str):

        def env(m: re.Match[str]) -> str:
            value = os.environ.get(m.group(1))
            if value is None:
                if m.group(2) is None:
                    raise FlowError(f"${{{m.group(1)}}}: no such environment variable")
                return m.group(2)
            return value

        return _ENV.sub(env, node)
    if isinstance(node, list):
        return [_substitute(v) for v in node]
    if isinstance(node, dict):
        return {k: _substitute(v) for k, v in node.items()}
    return node


def _step(raw: Any, index: int) -> Step:
    where = f"steps[{index}]"
    if raw == "hang_up":
        return HangUp()
    if raw == "ended":
        return Ended()
    if not isinstance(raw, dict) or not raw:
        raise FlowError(f"{where}: expected a step such as {{press: '12'}}, got {raw!r}")
    kinds = [k for k in raw if k in _STEPS]
    if len(kinds) != 1:
        names = ", ".join(_STEPS)
        raise FlowError(f"{where}: expected exactly one of {names}; got {', '.join(map(str, raw))}")
    try:
        return _STEPS[kinds[0]].model_validate(raw)  # type: ignore[return-value]
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or kinds[0]}: {e['msg']}" for e in exc.errors()
        )
        raise FlowError(f"{where} ({kinds[0]}): {problems}") from None


def parse_flow(text: str, *, name: str = "", folder: Path = Path()) -> Flow:
    """A flow from its YAML text. Raises :class:`FlowError` saying what is wrong where."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FlowError(f"not YAML: {exc}") from None
    if not isinstance(document, dict):
        raise FlowError("expected a mapping with app and steps")
    document = _substitute(document)
    raw_steps = document.pop("steps", [])
    if not isinstance(raw_steps, list):
        raise FlowError("steps: expected a list of steps")
    steps = [_step(s, i) for i, s in enumerate(raw_steps)]
    document.setdefault("name", name)
    try:
        return Flow.model_validate({**document, "steps": steps, "folder": folder})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise FlowError(problems) from None


def load_flow(path: Path) -> Flow:
    """The flow in the file ``path`` (see :func:`parse_flow`)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise FlowError(f"cannot read it: {exc.strerror}") from None
    return parse_flow(text, name=path.stem, folder=path.resolve().parent)
