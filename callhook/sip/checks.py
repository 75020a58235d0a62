"""What a user agent checks in a framed message before processing it (RFC 3261 §8.2, §8.1.3).

:func:`callhook.sip.message.parse` only frames a message; these functions parse the
header fields a UA relies on and decide, as RFC 3261 §8.2.1-§8.2.3 and the RFC 4475
application-layer cases say, whether a request is answered with an error instead of
being processed, or a response is dropped. callhook is a user agent, never a proxy or a
registrar, and that shapes the answers (noted per check).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import lru_cache

from callhook.sip.grammar import (
    SipMessageError,
    parse_cseq,
    parse_name_addr,
    parse_via,
    show,
)
from callhook.sip.message import Headers, Request, Response

__all__ = ["KNOWN_METHODS", "check_request", "check_response", "unsupported_options"]

#: Methods SIP defines (RFC 3261, 3262, 3311, 3428, 3515, 3903, 6086, 6665): a request
#: with one of these that the UA does not implement gets 405, any other method 501.
KNOWN_METHODS = frozenset(
    "INVITE ACK BYE CANCEL OPTIONS REGISTER PRACK UPDATE MESSAGE REFER PUBLISH INFO "
    "SUBSCRIBE NOTIFY".split()
)

# RFC 3261 §8.1.1: mandatory in every request (Max-Forwards too, but a UAS must accept
# its absence: RFC 4475 §3.4.1). RFC 3261 §8.1.3.3 / §20: the same five in responses.
_MANDATORY = ("To", "From", "Call-ID", "CSeq", "Via")
# RFC 3261 §7.3.1: only list-valued fields may appear more than once (RFC 4475 §3.3.8).
_SINGLE = ("To", "From", "Call-ID", "CSeq", "Max-Forwards", "Content-Type")
_MAGIC_COOKIE = "z9hG4bK"  # RFC 3261 §8.1.1.7


def check_request(
    req: Request,
    supported: Collection[str] = frozenset(),
    *,
    methods: Collection[str] | None = None,
    content_types: Collection[str] | None = None,
    schemes: Collection[str] = ("sip", "sips"),
) -> tuple[int, str] | None:
    """``(status, reason phrase)`` to answer ``req`` with instead of processing it, or None.

    In order (the first failing check wins):

    1. 400 when To, From, Call-ID, CSeq or Via is missing (RFC 3261 §8.1.1, RFC 4475
       §3.3.1), a single-valued field is repeated (§3.3.8), or To, From, CSeq,
       Call-ID, a Via, Contact or Record-Route value is malformed (§3.1.2.1, §3.1.2.4,
       §3.1.2.6, §3.1.2.13, §3.1.2.15), or the top Via branch is only the magic cookie
       (§3.2.1). Max-Forwards is optional, and its value, even 0, is not checked: a UAS
       processes the request as if it were positive (RFC 4475 §3.3.11; 483 is a proxy's
       answer, RFC 3261 §16.3 step 3). A From without tag is accepted (RFC 2543 peers,
       RFC 4475 §3.4.1).
    2. When ``methods`` (those the UA implements) is given: 405 for another SIP method,
       501 for a method SIP does not define (RFC 3261 §8.2.1, RFC 4475 §3.1.2.18). The
       caller adds ``Allow``.
    3. 400 when the CSeq method differs from the request method (RFC 4475 §3.1.2.17).
    4. 416 for a Request-URI scheme not in ``schemes`` (RFC 3261 §8.2.2.1, RFC 4475
       §3.3.2, §3.3.3); 400 for a malformed Request-URI or one carrying headers
       (RFC 3261 §19.1.1 Table 1, RFC 4475 §3.1.2.11).
    5. 420 when ``Require`` lists an option tag not in ``supported`` (RFC 3261 §8.2.2.3,
       not for ACK or CANCEL); :func:`unsupported_options` gives the ``Unsupported``
       value the response must carry.
    6. 400 for a body without Content-Type (RFC 3261 §20.15); when ``content_types`` is
       given, 415 for a body of another type or with a Content-Encoding (RFC 3261
       §8.2.3, RFC 4475 §3.3.6). The caller adds ``Accept``/``Accept-Encoding``.
    7. 406 for an INVITE whose ``Accept`` excludes ``application/sdp``, the only type an
       answer can have (RFC 3261 §20.1, RFC 4475 §3.3.15).

    No response may be sent to an ACK: for an ACK a non-None result means "discard".
    Dialog and transaction matters (481, 482, 491, 500 for CSeq order) are not checked.
    """
    headers = req.headers
    problem = _check_fields(headers, "request")
    if problem is not None:
        return 400, f"Bad Request ({problem})"
    for contact in headers.get_all("Contact"):
        if contact == "*" and req.method == "REGISTER":
            continue
        problem = _bad_address(contact, "Contact")
        if problem is not None:
            return 400, f"Bad Request ({problem})"
    for route in headers.get_all("Record-Route"):
        problem = _bad_address(route, "Record-Route")
        if problem is not None:
            return 400, f"Bad Request ({problem})"
    if req.top_via.branch == _MAGIC_COOKIE:
        return 400, "Bad Request (Via branch is only the magic cookie)"
    method = req.method
    if methods is not None and method not in methods:
        if method in KNOWN_METHODS:
            return 405, f"Method Not Allowed ({show(method)})"
        return 501, f"Not Implemented (method {show(method)})"
    cseq_method = req.cseq[1]
    if cseq_method != method:
        return 400, f"Bad Request (CSeq method {show(cseq_method)} is not {show(method)})"
    try:
        uri = req.parsed_uri
    except SipMessageError as exc:
        return 400, f"Bad Request (Request-URI: {exc.reason})"
    if uri.scheme not in schemes:
        return 416, f"Unsupported URI Scheme ({show(uri.scheme)})"
    if uri.headers:
        return 400, "Bad Request (Request-URI contains headers)"
    if method not in ("ACK", "CANCEL"):
        unknown = unsupported_options(req, supported)
        if unknown:
            return 420, f"Bad Extension ({show(', '.join(unknown), 100)})"
    if req.body:
        content_type = headers.get("Content-Type")
        if content_type is None:
            return 400, "Bad Request (body without Content-Type)"
        media = content_type.split(";", 1)[0].strip(" \t").lower()
        if content_types is not None:
            if media not in {t.lower() for t in content_types}:
                return 415, f"Unsupported Media Type ({show(media)})"
            encoding = headers.get("Content-Encoding")
            if encoding is not None and encoding.lower() != "identity":
                return 415, f"Unsupported Media Type (Content-Encoding {show(encoding)})"
    if method == "INVITE" and "Accept" in headers:
        ranges = [a.split(";", 1)[0].strip(" \t").lower() for a in headers.get_all("Accept")]
        if not any(r in ("application/sdp", "application/*", "*/*") for r in ranges):
            return 406, "Not Acceptable (Accept excludes application/sdp)"
    return None


def check_response(resp: Response) -> str | None:
    """Why a user agent client must discard ``resp``, or None to process it.

    Missing or malformed To, From, Call-ID, CSeq or Via (RFC 4475 §3.1.2.5: a CSeq
    beyond 2**31-1 is simply discarded), repeated single-valued fields, and more than
    one Via value: a UAC discards such a response (RFC 3261 §8.1.3.3), which also
    keeps a forged Via from steering anything (RFC 4475 §3.3.10).
    """
    problem = _check_fields(resp.headers, "response")
    if problem is not None:
        return problem
    if len(resp.headers.get_all("Via")) != 1:
        return "more than one Via value in a response (RFC 3261 §8.1.3.3)"
    return None


def unsupported_options(req: Request, supported: Collection[str]) -> list[str]:
    """The ``Require`` option tags not in ``supported``, for a 420's ``Unsupported``."""
    known = {s.lower() for s in supported}
    return [tag for tag in req.headers.get_all("Require") if tag.lower() not in known]


def _check_fields(headers: Headers, what: str) -> str | None:
    """The mandatory fields are present, single and well formed; else the problem."""
    counts: dict[str, int] = {}
    for name, _ in headers.items():  # known names are canonical
        counts[name] = counts.get(name, 0) + 1
    missing = [name for name in _MANDATORY if name not in counts]
    if missing:
        return f"missing {', '.join(missing)}"
    repeated = [name for name in _SINGLE if counts.get(name, 0) > 1]
    if repeated:
        return f"more than one {', '.join(repeated)}"
    for name in ("From", "To"):
        problem = _bad_address(headers.get(name) or "", name)
        if problem is not None:
            return problem
    call_id = headers.get("Call-ID") or ""
    # §25.1: callid = word ["@" word], every character of a word visible ASCII. Any
    # visible ASCII is taken (some user agents use characters beyond word's); bytes
    # beyond ASCII are not: the Call-ID names the call in logs, files and APIs.
    if not call_id or not all("!" <= c <= "~" for c in call_id):
        return f"bad Call-ID {show(call_id)}"
    try:
        parse_cseq(headers.get("CSeq") or "")
    except SipMessageError as exc:
        return exc.reason
    vias = headers.get_all("Via")
    for via in vias:
        problem = _problem(parse_via, via)
        if problem is not None:
            return problem
    if not vias:
        return f"empty Via in {what}"
    return None


def _bad_address(value: str, name: str) -> str | None:
    problem = _problem(parse_name_addr, value)
    return None if problem is None else f"{name}: {problem}"


# A call's requests repeat the same From, To and Via values: each is judged once while
# it is among the values seen last (the verdict depends on the parser and the text alone).
@lru_cache(maxsize=2048)
def _problem(parse: Callable[[str], object], value: str) -> str | None:
    """Why ``parse`` refuses ``value`` (None: it takes it)."""
    try:
        parse(value)
    except SipMessageError as exc:
        return exc.reason
    return None
