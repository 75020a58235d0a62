"""Building SIP responses (RFC 3261 §8.2.6) and naming why a call ended."""

from __future__ import annotations

from collections.abc import Iterable

from callhook.sip.message import Headers, Request, Response, SipMessageError

REASONS = {
    100: "Trying",
    180: "Ringing",
    183: "Session Progress",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    407: "Proxy Authentication Required",
    408: "Request Timeout",
    415: "Unsupported Media Type",
    416: "Unsupported URI Scheme",
    420: "Bad Extension",
    422: "Session Interval Too Small",
    480: "Temporarily Unavailable",
    481: "Call/Transaction Does Not Exist",
    483: "Too Many Hops",
    486: "Busy Here",
    487: "Request Terminated",
    488: "Not Acceptable Here",
    491: "Request Pending",
    500: "Server Internal Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "Version Not Supported",
    603: "Decline",
}

COPIED = ("From", "To", "Call-ID", "CSeq")


def make_response(
    request: Request,
    status: int,
    reason: str | None = None,
    *,
    server: str | None,
    to_tag: str | None = None,
    contact: str | None = None,
    extra: Iterable[tuple[str, str]] = (),
    body: bytes = b"",
) -> Response:
    """A response to ``request``: Via, From, To, Call-ID and CSeq copied (§8.2.6.2).

    ``to_tag`` is added to a To without one (every response but 100 needs it);
    a response that creates a dialog (a 1xx or 2xx to INVITE) also gets the
    Record-Route copied (§12.1.1) and ``contact``. ``server``: the Server header
    (None: none, for answers that must not say what answers them).
    """
    headers = Headers()
    for via in request.headers.get_all("Via"):
        headers.add("Via", via)
    for name in COPIED:
        value = request.headers.get(name)
        if value is not None:
            headers.add(name, value)
    if status > 100 and to_tag and not request.to_tag:
        headers.set("To", f"{request.headers.get('To')};tag={to_tag}")
    if request.method == "INVITE" and 100 < status < 300:
        for route in request.headers.get_all("Record-Route"):
            headers.add("Record-Route", route)
        if contact is not None:
            headers.add("Contact", contact)
    if server is not None:
        headers.add("Server", server)
    for name, value in extra:
        headers.add(name, value)
    if body:
        headers.add("Content-Type", "application/sdp")
    return Response(status, reason or REASONS.get(status, ""), headers, body)


def error_response(error: SipMessageError, *, server: str) -> Response | None:
    """The answer to a request that could not be processed, from the headers that survived.

    None when there is nothing to answer: it was a response or an ACK, or it has
    no Via to answer along. The headers a response copies (From, To, Call-ID,
    CSeq) are copied when they survived; a missing one is what the 400 is about.
    """
    salvaged = error.headers
    if not error.is_request or salvaged is None:
        return None
    headers = Headers()
    for via in salvaged.get_all("Via"):
        headers.add("Via", via)
    for name in COPIED:
        value = salvaged.get(name)
        if value:
            headers.add(name, value)
    if not headers.get("Via"):
        return None  # nowhere to send it
    if (headers.get("CSeq") or "").split()[-1:] == ["ACK"]:
        return None  # an ACK is never answered
    status = error.status if 400 <= error.status < 700 else 400
    headers.add("Server", server)
    reason = f"{REASONS.get(status, 'Bad Request')} ({error.reason})"[:200]
    return Response(status, reason, headers)


def cause_of(status: int) -> str:
    """The final page's ``call_cause`` for an outbound call's final failure response."""
    if status in (486, 600):
        return "busy"
    if status in (408, 480, 487):
        return "no_answer"
    if status in (404, 410, 484, 485, 604):
        return "unobtainable"
    return "failed"
