"""SIP dialogs: RFC 3261 §12, sans-IO.

A dialog is the peer-to-peer relationship an INVITE and its 2xx create:
Call-ID, the two tags, the remote target (the peer's Contact), the route set
(the Record-Route of the dialog-creating messages) and the two CSeq counters.
Requests inside the dialog (BYE, re-INVITE, INFO, ACK for a 2xx) are built
from it, so that they follow the route set: behind a proxy such as Kamailio
an in-dialog request that ignores the Record-Route never arrives.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

from callhook.sip.message import Headers, Request, Response, parse_name_addr, parse_uri
from callhook.sip.transport import Target, Transport, target_of

logger = logging.getLogger("callhook.sip")


@dataclass
class Dialog:
    """One dialog, from our side."""

    call_id: str
    local_tag: str
    remote_tag: str
    local_uri: str  # the From (UAC) / To (UAS) value, without tag
    remote_uri: str
    remote_target: str  # the peer's Contact URI
    route_set: list[str] = field(default_factory=list)
    local_seq: int = field(default_factory=lambda: random.randint(1, 10_000))
    remote_seq: int | None = None

    @classmethod
    def as_uas(cls, invite: Request, local_tag: str) -> Dialog:
        """The dialog a UAS creates by answering ``invite`` (§12.1.1)."""
        contact = invite.headers.get("Contact") or ""
        caller = _without_tag(invite.headers.get("From") or "")
        return cls(
            call_id=invite.call_id,
            local_tag=local_tag,
            remote_tag=invite.from_tag or "",
            local_uri=_without_tag(invite.headers.get("To") or ""),
            remote_uri=caller,
            # No Contact (an RFC 2543 caller may omit it): the caller's address of record.
            remote_target=_target(contact, _target(caller, invite.uri)),
            # The UAS keeps the Record-Route order (§12.1.1).
            route_set=_usable(invite.headers.get_all("Record-Route")),
            remote_seq=invite.cseq[0],
        )

    @classmethod
    def as_uac(cls, invite: Request, response: Response) -> Dialog:
        """The dialog a UAC gets from a 2xx (or 1xx with tag) to ``invite`` (§12.1.2)."""
        contact = response.headers.get("Contact") or ""
        return cls(
            call_id=invite.call_id,
            local_tag=invite.from_tag or "",
            remote_tag=response.to_tag or "",
            local_uri=_without_tag(invite.headers.get("From") or ""),
            remote_uri=_without_tag(response.headers.get("To") or ""),
            remote_target=_target(contact, invite.uri),
            # The UAC reverses the Record-Route order (§12.1.2).
            route_set=_usable(list(reversed(response.headers.get_all("Record-Route")))),
            local_seq=invite.cseq[0],
        )

    def request(
        self,
        method: str,
        via: str,
        *,
        contact: str,
        body: bytes = b"",
        content_type: str | None = None,
        cseq: int | None = None,
        extra: list[tuple[str, str]] | None = None,
    ) -> Request:
        """A request inside the dialog (§12.2.1.1); ``via`` is the whole Via value to use."""
        if cseq is None:
            self.local_seq += 1
            cseq = self.local_seq
        uri = self.remote_target
        routes = list(self.route_set)
        if routes and not _loose(routes[0]):
            # Strict routing (RFC 2543 proxies): the first route becomes the
            # request-URI and the remote target goes last (§12.2.1.1).
            uri = _uri_of(routes[0])
            routes = [*routes[1:], f"<{self.remote_target}>"]
        headers = Headers()
        headers.add("Via", via)
        headers.add("Max-Forwards", "70")
        headers.add("From", f"{self.local_uri};tag={self.local_tag}")
        headers.add("To", f"{self.remote_uri};tag={self.remote_tag}")
        headers.add("Call-ID", self.call_id)
        headers.add("CSeq", f"{cseq} {method}")
        for route in routes:
            headers.add("Route", route)
        headers.add("Contact", contact)
        for name, value in extra or []:
            headers.add(name, value)
        if content_type is not None:
            headers.add("Content-Type", content_type)
        return Request(method, uri, headers, body)

    def next_hop(self, default: Transport = "udp") -> Target:
        """Where requests of this dialog are sent: the first route, else the remote target.

        Its transport is the URI's (``sips:``, ``;transport=``), else ``default`` (the
        one the dialog was made over: a peer on TCP that leaves its Contact without
        ``;transport=tcp`` still expects TCP). Raises ValueError when that is not a SIP
        URI with a host.
        """
        uri = parse_uri(_uri_of(self.route_set[0]) if self.route_set else self.remote_target)
        return target_of(uri, default)

    def accept_remote_cseq(self, request: Request) -> bool:
        """Whether an in-dialog request's CSeq is in order (§12.2.2: lower ones get a 500)."""
        number = request.cseq[0]
        if self.remote_seq is not None and number < self.remote_seq and request.method != "ACK":
            return False
        if request.method not in ("ACK", "CANCEL"):
            self.remote_seq = number
        return True

    def update_target(self, request: Request) -> None:
        """A target-refresh request (re-INVITE, UPDATE) may move the remote target (§12.2.2)."""
        contact = request.headers.get("Contact")
        if contact:
            self.remote_target = _target(contact, self.remote_target)


def _usable(routes: list[str]) -> list[str]:
    """The routes that are SIP URIs we can send to; anything else would make every
    in-dialog request malformed, so it is dropped (and logged)."""
    usable = []
    for route in routes:
        try:
            uri = parse_uri(_uri_of(route))
        except ValueError:
            uri = None
        if uri is not None and uri.scheme in ("sip", "sips") and uri.host:
            usable.append(route)
        else:
            logger.warning("dropping unusable route %r from a dialog's route set", route)
    return usable


def _loose(route: str) -> bool:
    """Whether a route is a loose router (``;lr``, any case: §12.2.1.1, §25.1)."""
    try:
        return "lr" in {k.lower() for k in parse_uri(_uri_of(route)).params}
    except ValueError:
        return False


def _uri_of(name_addr: str) -> str:
    """The URI inside a name-addr (``<sip:x;lr>`` -> ``sip:x;lr``)."""
    start, end = name_addr.find("<"), name_addr.find(">")
    if start != -1 and end > start:
        return name_addr[start + 1 : end]
    return name_addr.split(";", 1)[0].strip()


def _target(contact: str, fallback: str) -> str:
    if not contact or contact.strip() == "*":
        return fallback
    try:
        return str(parse_name_addr(contact).uri)
    except ValueError:
        return fallback


def _without_tag(value: str) -> str:
    """A From/To value without its tag parameter (the dialog adds the tags itself)."""
    try:
        addr = parse_name_addr(value)
    except ValueError:
        return value
    addr.params.pop("tag", None)
    return str(addr)
