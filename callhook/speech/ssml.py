"""SSML in ``text_to_say``: checked when an action list arrives, and rendered into what
callhook's voices say: words (with a speaking rate and a volume), pauses, and files of the
application's media store.

Aculab Cloud's ``text_to_say`` takes SSML, handed to Amazon Polly, so applications written
for it use Polly's dialect of SSML 1.1: a ``text_to_say`` is SSML when it starts (after
white space) with ``<speak`` or an XML declaration; anything else is plain text, read as
written, ``<`` and all. What each element does is in docs/behaviour.md ("SSML"); in short:

* ``break`` (``time`` up to 10 s, or ``strength``): a pause;
* ``prosody`` (``rate``, ``volume``; ``pitch`` is taken and not followed), ``emphasis``:
  the words' speaking rate and volume;
* ``say-as`` (:mod:`callhook.speech.sayas`), ``sub``: other words for the text;
* ``p``, ``s``: sentences and paragraphs apart;
* ``audio``: a file of the application's media store named by ``src``, else its content;
* ``speak``, ``mark``, ``desc``: structure, nothing said; anything else (``phoneme``,
  ``lang``, ``voice``, ``w``, ``amazon:effect``, Aculab's ``acu-engine``, tags of other
  dialects): its text content, never its markup.

Malformed SSML (not well-formed XML, another root element, a DOCTYPE or entity
declaration, a known attribute with a value it cannot have) is an :class:`SsmlError`, which
makes the action list invalid. Sans-IO: text in, parts out.
"""

from __future__ import annotations

import math
import re
import xml.parsers.expat
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache

from callhook.speech import sayas
from callhook.speech.sentences import sentences

#: The longest pause a ``break`` may ask for (s): Polly's limit.
MAX_BREAK_SECONDS = 10.0
#: ``break strength``'s pauses (s): none and x-weak are none, weak and medium a comma's,
#: strong a sentence's, x-strong a paragraph's (Polly's equivalences; the lengths ours).
BREAK_STRENGTHS = {
    "none": 0.0,
    "x-weak": 0.0,
    "weak": 0.25,
    "medium": 0.25,
    "strong": 0.5,
    "x-strong": 0.8,
}
#: ``prosody rate``'s words, as a factor of the voice's own rate; "N%" is N/100, 20-200 %.
RATES = {"x-slow": 0.6, "slow": 0.8, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.5}
MIN_RATE, MAX_RATE = 0.2, 2.0
#: ``prosody volume``'s words, in dB from the voice's level; "+NdB"/"-NdB" too.
VOLUMES = {
    "silent": -math.inf,
    "x-soft": -12.0,
    "soft": -6.0,
    "medium": 0.0,
    "default": 0.0,
    "loud": 6.0,
    "x-loud": 10.0,
}
#: ``emphasis level``: (rate factor, dB): said more slowly and louder, or faster and softer.
EMPHASIS = {
    "strong": (0.85, 4.0),
    "moderate": (0.92, 2.0),
    "none": (1.0, 0.0),
    "reduced": (1.1, -4.0),
}
#: Elements inside one another, at most.
MAX_DEPTH = 64
#: The pause after a paragraph (``p``), over the sentence's own.
PARAGRAPH_PAUSE = 0.4

_SSML_START = re.compile(r"^\s*<(\?xml|!DOCTYPE|speak[\s>/])")
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s)\s*$")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_DB = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*dB\s*$", re.I)


class SsmlError(ValueError):
    """A ``text_to_say`` that starts as SSML and is not (the message says where and why)."""


@dataclass(frozen=True, slots=True)
class Spoken:
    """Words, said at ``rate`` times the voice's speed, ``volume_db`` from its level."""

    text: str
    rate: float = 1.0
    volume_db: float = 0.0


@dataclass(frozen=True, slots=True)
class Pause:
    """Silence."""

    seconds: float


@dataclass(frozen=True, slots=True)
class StoreAudio:
    """A file of the application's media store, or, when it has none of that name,
    ``fallback``."""

    name: str
    fallback: tuple[Spoken | Pause, ...] = ()


Part = Spoken | Pause | StoreAudio


def is_ssml(text: str) -> bool:
    """Whether a ``text_to_say`` is SSML (it starts with ``<speak``)."""
    return _SSML_START.match(text) is not None


@lru_cache(maxsize=1024)
def parts(text: str, language: str | None = None) -> tuple[Part, ...]:
    """What a ``text_to_say`` says, a sentence (or a pause, or a file) a part; plain text
    is its sentences. Raises :class:`SsmlError` for malformed SSML."""
    if not is_ssml(text):
        return tuple(Spoken(s) for s in sentences(text))
    return _Renderer(language).render(_tree(text))


def check(text: str) -> None:
    """Raises :class:`SsmlError` if ``text`` is SSML and malformed (plain text is fine)."""
    if is_ssml(text):
        parts(text)


def spoken_text(text: str, language: str | None = None) -> str:
    """The words a ``text_to_say`` says, without markup (for transcripts and logs)."""
    said: list[str] = []
    for part in parts(text, language):
        if isinstance(part, Spoken):
            said.append(part.text)
        elif isinstance(part, StoreAudio):
            said += [p.text for p in part.fallback if isinstance(p, Spoken)]
    return " ".join(said)


# --- parsing -------------------------------------------------------------------------


@dataclass
class _Element:
    tag: str
    attributes: dict[str, str]
    children: list[_Element | str] = field(default_factory=list)
    line: int = 1
    column: int = 0

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)


def _tree(text: str) -> _Element:
    """The document's elements; SsmlError where it is not well-formed or declares a DTD."""
    parser = xml.parsers.expat.ParserCreate()
    root: list[_Element] = []
    stack: list[_Element] = []

    def start(tag: str, attributes: dict[str, str]) -> None:
        if len(stack) >= MAX_DEPTH:
            # (The renderer recurses: a page of thousands of nested elements must be an
            # invalid list, not a RecursionError.)
            raise SsmlError(f"SSML nested more than {MAX_DEPTH} elements deep")
        element = _Element(
            tag, attributes, line=parser.CurrentLineNumber, column=parser.CurrentColumnNumber
        )
        if stack:
            stack[-1].children.append(element)
        else:
            root.append(element)
        stack.append(element)

    def end(_tag: str) -> None:
        stack.pop()

    def characters(data: str) -> None:
        if stack:
            stack[-1].children.append(data)

    def refuse(*_args: object) -> None:
        # (An entity defined in a DTD could expand to gigabytes: none is taken.)
        raise SsmlError("SSML must not have a DOCTYPE")

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = characters
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as exc:
        message = xml.parsers.expat.errors.messages.get(exc.code, str(exc))
        raise SsmlError(
            f"malformed SSML: {message} (line {exc.lineno}, column {exc.offset + 1})"
        ) from None
    if not root or root[0].tag != "speak":
        raise SsmlError("SSML must be one <speak> element")
    return root[0]


# --- rendering -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Style:
    rate: float = 1.0
    volume_db: float = 0.0


#: Between two parts: nothing (the same sentence goes on), or a sentence's end.
_BOUNDARY = object()


class _Renderer:
    """One document into parts: the words in order, each run of one style, then split
    into sentences as plain text is."""

    def __init__(self, language: str | None) -> None:
        self.language = language
        self.out: list[object] = []  # (text, style), Pause, StoreAudio or _BOUNDARY

    def render(self, speak: _Element) -> tuple[Part, ...]:
        self.language = speak.attributes.get("xml:lang", self.language)
        self._children(speak, _Style())
        return tuple(self._joined())

    def _children(self, element: _Element, style: _Style) -> None:
        for child in element.children:
            if isinstance(child, str):
                self.out.append((child, style))
            else:
                self._element(child, style)

    def _element(self, e: _Element, style: _Style) -> None:
        handler = _HANDLERS.get(e.tag)
        if handler is None:
            self._children(e, style)  # unknown: its text content, never its markup
        else:
            handler(self, e, style)

    def _break(self, e: _Element, style: _Style) -> None:
        if "time" in e.attributes:
            seconds = _seconds(e, e.attributes["time"])
        else:
            strength = e.attributes.get("strength", "medium")
            if strength not in BREAK_STRENGTHS:
                raise _bad(e, "strength", strength, ", ".join(BREAK_STRENGTHS))
            seconds = BREAK_STRENGTHS[strength]
        self.out.append(Pause(seconds))

    def _prosody(self, e: _Element, style: _Style) -> None:
        rate, volume = style.rate, style.volume_db
        if "rate" in e.attributes:
            rate *= _rate(e, e.attributes["rate"])
        if "volume" in e.attributes:
            volume += _volume(e, e.attributes["volume"])
        self._children(e, _Style(min(max(rate, MIN_RATE), MAX_RATE), volume))

    def _emphasis(self, e: _Element, style: _Style) -> None:
        level = e.attributes.get("level", "moderate")
        if level not in EMPHASIS:
            raise _bad(e, "level", level, ", ".join(EMPHASIS))
        factor, db = EMPHASIS[level]
        self._children(e, replace(style, rate=style.rate * factor, volume_db=style.volume_db + db))

    def _say_as(self, e: _Element, style: _Style) -> None:
        kind = e.attributes.get("interpret-as")
        if kind is None:
            raise SsmlError(f"<say-as> needs interpret-as{_where(e)}")
        text = e.text()
        language = e.attributes.get("xml:lang", self.language)
        words = _say(kind.lower(), text, e.attributes.get("format"), language)
        self.out.append((words, style))

    def _sub(self, e: _Element, style: _Style) -> None:
        if "alias" not in e.attributes:
            raise SsmlError(f"<sub> needs alias{_where(e)}")
        self.out.append((e.attributes["alias"], style))

    def _sentence(self, e: _Element, style: _Style) -> None:
        self.out.append(_BOUNDARY)
        self._children(e, style)
        self.out.append(_BOUNDARY)

    def _paragraph(self, e: _Element, style: _Style) -> None:
        self._sentence(e, style)
        self.out.append(Pause(PARAGRAPH_PAUSE))

    def _audio(self, e: _Element, style: _Style) -> None:
        src = e.attributes.get("src", "").strip()
        if not src or re.match(r"^[a-z][a-z0-9+.-]*:", src, re.I):
            # A URL: only the application's own files are played (docs/behaviour.md).
            self._children(e, style)
            return
        inner = _Renderer(self.language)
        inner._children(e, style)
        fallback = tuple(p for p in inner._joined() if not isinstance(p, StoreAudio))
        self.out.append(StoreAudio(src, fallback))

    def _nothing(self, e: _Element, style: _Style) -> None:
        return

    def _joined(self) -> list[Part]:
        """Runs of one style joined and split into sentences; pauses and files kept.

        A change of rate or volume starts a new piece (an engine speaks a piece at one
        rate); white space takes the style of the words around it."""
        result: list[Part] = []
        run: list[str] = []
        run_style = _Style()

        def flush() -> None:
            text = re.sub(r"\s+", " ", "".join(run)).strip()
            run.clear()
            if text:
                rate, volume = run_style.rate, run_style.volume_db
                result.extend(Spoken(s, rate, volume) for s in sentences(text))

        for item in self.out:
            if isinstance(item, tuple):
                text, style = item
                if text.strip() and style != run_style:
                    flush()
                    run_style = style
                run.append(text)
                continue
            flush()
            if isinstance(item, StoreAudio):
                result.append(item)
            elif isinstance(item, Pause) and item.seconds > 0:
                if result and isinstance(result[-1], Pause):
                    result[-1] = Pause(result[-1].seconds + item.seconds)
                else:
                    result.append(item)
        flush()
        return result


_HANDLERS: dict[str, Callable[[_Renderer, _Element, _Style], None]] = {
    "break": _Renderer._break,
    "prosody": _Renderer._prosody,
    "emphasis": _Renderer._emphasis,
    "say-as": _Renderer._say_as,
    "sub": _Renderer._sub,
    "s": _Renderer._sentence,
    "p": _Renderer._paragraph,
    "audio": _Renderer._audio,
    "mark": _Renderer._nothing,
    "desc": _Renderer._nothing,
}


def _say(kind: str, text: str, format_: str | None, language: str | None) -> str:
    if kind in ("characters", "spell-out", "verbatim"):
        return sayas.characters(text, language)
    if kind == "digits":
        return sayas.digits(text, language)
    if kind in ("cardinal", "number"):
        return sayas.cardinal(text, language)
    if kind == "ordinal":
        return sayas.ordinal(text, language)
    if kind == "telephone":
        return sayas.telephone(text, language)
    if kind == "date":
        return sayas.date(text, format_, language)
    if kind == "time":
        return sayas.time(text, language)
    if kind == "currency":
        return sayas.currency(text, language)
    return text  # (fraction, unit, address, expletive...: as written)


def _where(e: _Element) -> str:
    return f" (line {e.line}, column {e.column + 1})"


def _bad(e: _Element, attribute: str, value: str, allowed: str) -> SsmlError:
    return SsmlError(f"<{e.tag}> {attribute}={value!r} is not one of {allowed}{_where(e)}")


def _seconds(e: _Element, value: str) -> float:
    found = _TIME.match(value)
    if found is None:
        raise SsmlError(f"<break> time={value!r} is not like 500ms or 2s{_where(e)}")
    seconds = float(found[1]) / (1000.0 if found[2] == "ms" else 1.0)
    if seconds > MAX_BREAK_SECONDS:
        raise SsmlError(f"<break> time={value!r} is over {MAX_BREAK_SECONDS:g} s{_where(e)}")
    return seconds


def _rate(e: _Element, value: str) -> float:
    if value in RATES:
        return RATES[value]
    found = _PERCENT.match(value)
    if found is None or not 20.0 <= float(found[1]) <= 200.0:
        raise _bad(e, "rate", value, ", ".join(RATES) + " or 20%-200%")
    return float(found[1]) / 100.0


def _volume(e: _Element, value: str) -> float:
    if value in VOLUMES:
        return VOLUMES[value]
    found = _DB.match(value)
    if found is None:
        raise _bad(e, "volume", value, ", ".join(VOLUMES) + " or +NdB/-NdB")
    return float(found[1])
