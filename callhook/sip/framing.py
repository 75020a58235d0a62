"""Framing SIP messages on a stream transport (TCP, TLS). Sans-IO: bytes in, messages out.

UDP delivers one message per datagram; a stream does not, so (RFC 3261 §18.3)
each message's end is found from its header: the empty line that ends the
header, then exactly ``Content-Length`` octets of body. On a stream the header
is mandatory: a message without it cannot be framed, and the connection is
closed (there is no way to find where the next message starts).

Keep-alives (RFC 5626 §4.4.1, §3.5.1): a client sends a double CRLF "ping"
between messages; the server answers a single CRLF "pong". CRLFs between
messages are otherwise ignored (RFC 3261 §7.5).

Limits keep a peer from holding memory: a header longer than
``max_header`` octets or a message longer than ``max_message`` is a
:class:`FramingError`, after which the connection is closed (the caller
answers 413 or 400 first if it can, docs/security.md).

:class:`StreamFramer` is fed whatever arrived (:meth:`StreamFramer.feed`) and
returns the complete messages (raw bytes, for :func:`callhook.sip.message.parse`)
and the pings to answer, in order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: The most octets of header callhook reads before deciding a message is hostile.
MAX_HEADER = 16 * 1024
#: The most octets of a whole message (header and body) on a stream.
MAX_MESSAGE = 64 * 1024

PING = b"\r\n\r\n"
PONG = b"\r\n"

# Content-Length or its compact form "l" (RFC 3261 §7.3.3), at a line start.
_LENGTH = re.compile(rb"(?im)^(?:content-length|l)[ \t]*:[ \t]*([^\r\n]*?)[ \t]*\r?$")


class FramingError(ValueError):
    """The stream cannot be framed any more (the connection must be closed), and why.

    ``status`` is the response the caller may send first (413, 400), if any; ``head``
    the message's header when it was read whole (a 413 can then be answered).
    """

    def __init__(self, message: str, status: int = 400, head: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        self.head = head


@dataclass(frozen=True, slots=True)
class Ping:
    """A keep-alive ping (a double CRLF between messages): answer it with :data:`PONG`."""


@dataclass
class StreamFramer:
    """One connection's incoming byte stream, cut into SIP messages."""

    max_header: int = MAX_HEADER
    max_message: int = MAX_MESSAGE
    _buffer: bytearray = field(default_factory=bytearray)
    _failed: str | None = None

    def feed(self, data: bytes) -> list[bytes | Ping]:
        """The messages (and pings) that ``data`` completes; FramingError once it cannot go on."""
        if self._failed is not None:
            raise FramingError(self._failed)
        self._buffer += data
        out: list[bytes | Ping] = []
        while True:
            item = self._next()
            if item is None:
                return out
            out.append(item)

    def _next(self) -> bytes | Ping | None:
        buffer = self._buffer
        # Between messages: CRLFs. A double CRLF is a ping (RFC 5626 §4.4.1); a lone
        # one, or a stray CR or LF, is ignored (RFC 3261 §7.5).
        while bytes(buffer[:1]) in (b"\r", b"\n"):
            if buffer.startswith(PING):
                del buffer[:4]
                return Ping()
            if len(buffer) < 4 and PING.startswith(bytes(buffer)):
                return None  # a ping may still be arriving
            del buffer[: 2 if buffer.startswith(b"\r\n") else 1]
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > self.max_header:
                self._fail(f"a header longer than {self.max_header} octets", 413)
            return None
        head_length = end + 4
        if head_length > self.max_header:
            self._fail(f"a header longer than {self.max_header} octets", 413)
        values = _LENGTH.findall(bytes(buffer[:end]))
        if not values:
            self._fail("a message without Content-Length on a stream (RFC 3261 §18.3)")
        lengths = {v.strip() for v in values}
        if len(lengths) != 1 or not next(iter(lengths)).isdigit():
            self._fail(f"an unusable Content-Length: {b', '.join(values).decode(errors='replace')}")
        body_length = int(next(iter(lengths)))
        total = head_length + body_length
        if total > self.max_message:
            head = bytes(buffer[:head_length])
            self._fail(f"a message of {total} octets (more than {self.max_message})", 413, head)
        if len(buffer) < total:
            return None
        message = bytes(buffer[:total])
        del buffer[:total]
        return message

    def _fail(self, why: str, status: int = 400, head: bytes = b"") -> None:
        self._failed = why
        self._buffer.clear()
        raise FramingError(why, status, head)

    @property
    def pending(self) -> int:
        """Octets received and not yet part of a complete message."""
        return len(self._buffer)
