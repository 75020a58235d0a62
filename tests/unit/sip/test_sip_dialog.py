"""SIP dialogs (callhook/sip/dialog.py): RFC 3261 §12 creation, in-dialog requests, CSeq order."""

from __future__ import annotations

from callhook.sip.dialog import Dialog
from callhook.sip.message import Request, Response, parse, parse_name_addr
from callhook.sip.transport import Target

VIA = "SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKdlg1;rport"
CONTACT = "<sip:callhook@192.0.2.1:5060>"


def parse_request(data: str) -> Request:
    msg = parse(data.encode())
    assert isinstance(msg, Request)
    return msg


def parse_response(data: str) -> Response:
    msg = parse(data.encode())
    assert isinstance(msg, Response)
    return msg


def inbound_invite(record_route: tuple[str, ...] = (), contact: str | None = None) -> Request:
    rr = "".join(f"Record-Route: {r}\r\n" for r in record_route)
    ct = f"Contact: {contact}\r\n" if contact is not None else ""
    return parse_request(
        "INVITE sip:app@192.0.2.1:5060 SIP/2.0\r\n"
        "Via: SIP/2.0/UDP 203.0.113.5:5060;branch=z9hG4bKp1\r\n"
        "Via: SIP/2.0/UDP 192.0.2.20:5070;branch=z9hG4bKu1\r\n"
        f"{rr}"
        'From: "Bob" <sip:bob@example.net>;tag=remote1\r\n'
        "To: <sip:app@192.0.2.1>\r\n"
        "Call-ID: dlg-uas@example.net\r\n"
        "CSeq: 314 INVITE\r\n"
        f"{ct}"
        "Content-Length: 0\r\n\r\n"
    )


def outbound_invite() -> Request:
    return parse_request(
        "INVITE sip:bob@example.net SIP/2.0\r\n"
        f"Via: {VIA}\r\n"
        'From: "App" <sip:callhook@192.0.2.1:5060>;tag=local1\r\n'
        "To: <sip:bob@example.net>\r\n"
        "Call-ID: dlg-uac@192.0.2.1\r\n"
        "CSeq: 1 INVITE\r\n"
        f"Contact: {CONTACT}\r\n"
        "Content-Length: 0\r\n\r\n"
    )


def ok_for(invite: Request, record_route: tuple[str, ...], contact: str) -> Response:
    rr = "".join(f"Record-Route: {r}\r\n" for r in record_route)
    return parse_response(
        "SIP/2.0 200 OK\r\n"
        f"Via: {invite.headers.get('Via')}\r\n"
        f"{rr}"
        f"From: {invite.headers.get('From')}\r\n"
        f"To: {invite.headers.get('To')};tag=remote2\r\n"
        f"Call-ID: {invite.call_id}\r\n"
        "CSeq: 1 INVITE\r\n"
        f"Contact: {contact}\r\n"
        "Content-Length: 0\r\n\r\n"
    )


def test_uas_dialog_from_an_invite() -> None:
    invite = inbound_invite(
        record_route=("<sip:p1.example.com;lr>", "<sip:p2.example.com;lr>"),
        contact="<sip:bob@192.0.2.20:5070;transport=udp>",
    )
    dialog = Dialog.as_uas(invite, "local9")
    assert dialog.call_id == "dlg-uas@example.net"
    assert dialog.local_tag == "local9"
    assert dialog.remote_tag == "remote1"
    # §12.1.1: route set = Record-Route in order; remote target = Contact; remote seq.
    assert dialog.route_set == ["<sip:p1.example.com;lr>", "<sip:p2.example.com;lr>"]
    assert dialog.remote_target == "sip:bob@192.0.2.20:5070;transport=udp"
    assert dialog.remote_seq == 314
    # Local / remote URIs without tags.
    assert parse_name_addr(dialog.local_uri).tag is None
    assert str(parse_name_addr(dialog.local_uri).uri) == "sip:app@192.0.2.1"
    remote = parse_name_addr(dialog.remote_uri)
    assert remote.tag is None
    assert remote.display == "Bob"
    assert str(remote.uri) == "sip:bob@example.net"


def test_uac_dialog_reverses_the_record_route() -> None:
    invite = outbound_invite()
    ok = ok_for(
        invite,
        record_route=("<sip:p1.example.com;lr>", "<sip:p2.example.com;lr>"),
        contact="<sip:bob@192.0.2.20:5070>",
    )
    dialog = Dialog.as_uac(invite, ok)
    assert dialog.local_tag == "local1"
    assert dialog.remote_tag == "remote2"
    # §12.1.2: route set = Record-Route of the response, in reverse order.
    assert dialog.route_set == ["<sip:p2.example.com;lr>", "<sip:p1.example.com;lr>"]
    assert dialog.remote_target == "sip:bob@192.0.2.20:5070"
    assert dialog.local_seq == 1  # the INVITE's CSeq
    assert dialog.remote_seq is None  # §12.1.2: empty
    assert str(parse_name_addr(dialog.remote_uri).uri) == "sip:bob@example.net"
    assert parse_name_addr(dialog.local_uri).display == "App"


def test_uac_dialog_with_record_route_in_one_header_line() -> None:
    invite = outbound_invite()
    ok = ok_for(
        invite,
        record_route=("<sip:a.example.com;lr>, <sip:b.example.com;lr>, <sip:c.example.com;lr>",),
        contact="<sip:bob@192.0.2.20>",
    )
    dialog = Dialog.as_uac(invite, ok)
    assert dialog.route_set == [
        "<sip:c.example.com;lr>",
        "<sip:b.example.com;lr>",
        "<sip:a.example.com;lr>",
    ]


def test_loose_routing_request() -> None:
    dialog = Dialog.as_uas(
        inbound_invite(
            record_route=("<sip:p1.example.com;lr>", "<sip:p2.example.com:5080;lr>"),
            contact="<sip:bob@192.0.2.20:5070>",
        ),
        "local9",
    )
    first_seq = dialog.local_seq
    bye = dialog.request("BYE", VIA, contact=CONTACT)
    # §12.2.1.1, loose routing: Request-URI = remote target, Route = route set in order.
    assert bye.method == "BYE"
    assert bye.uri == "sip:bob@192.0.2.20:5070"
    assert bye.headers.get_all("Route") == [
        "<sip:p1.example.com;lr>",
        "<sip:p2.example.com:5080;lr>",
    ]
    assert bye.headers.get_all("Via") == [VIA]
    assert bye.call_id == "dlg-uas@example.net"
    assert bye.from_tag == "local9"
    assert bye.to_tag == "remote1"
    assert str(parse_name_addr(bye.headers.get("From") or "").uri) == "sip:app@192.0.2.1"
    assert str(parse_name_addr(bye.headers.get("To") or "").uri) == "sip:bob@example.net"
    assert bye.headers.get("Contact") == CONTACT
    assert bye.headers.get("Max-Forwards") == "70"
    assert bye.cseq == (first_seq + 1, "BYE")
    assert dialog.next_hop() == Target("p1.example.com", 5060)


def test_cseq_increments_per_request_and_override_does_not_consume() -> None:
    dialog = Dialog.as_uac(
        outbound_invite(), ok_for(outbound_invite(), (), contact="<sip:bob@192.0.2.20>")
    )
    ack = dialog.request("ACK", VIA, contact=CONTACT, cseq=1)
    assert ack.cseq == (1, "ACK")
    info = dialog.request(
        "INFO", VIA, contact=CONTACT, body=b"Signal=5\r\n", content_type="application/dtmf-relay"
    )
    bye = dialog.request("BYE", VIA, contact=CONTACT)
    assert info.cseq == (2, "INFO")
    assert bye.cseq == (3, "BYE")
    assert info.body == b"Signal=5\r\n"
    assert info.headers.get("Content-Type") == "application/dtmf-relay"
    assert "Route" not in bye.headers
    assert bye.uri == "sip:bob@192.0.2.20"
    assert dialog.next_hop() == Target("192.0.2.20", 5060)


def test_strict_routing_when_first_route_has_no_lr() -> None:
    dialog = Dialog.as_uas(
        inbound_invite(
            record_route=("<sip:strict.example.com:5070>", "<sip:p2.example.com;lr>"),
            contact="<sip:bob@192.0.2.20:5070>",
        ),
        "local9",
    )
    bye = dialog.request("BYE", VIA, contact=CONTACT)
    # §12.2.1.1: first route into the Request-URI, the rest of the route set, then the
    # remote target as the last Route value.
    assert bye.uri == "sip:strict.example.com:5070"
    assert bye.headers.get_all("Route") == [
        "<sip:p2.example.com;lr>",
        "<sip:bob@192.0.2.20:5070>",
    ]
    assert dialog.next_hop() == Target("strict.example.com", 5070)
    # The dialog itself is not changed by building the request.
    assert dialog.route_set == ["<sip:strict.example.com:5070>", "<sip:p2.example.com;lr>"]
    assert dialog.remote_target == "sip:bob@192.0.2.20:5070"


def test_single_strict_route() -> None:
    dialog = Dialog.as_uas(
        inbound_invite(record_route=("<sip:strict.example.com>",), contact="<sip:bob@h>"),
        "l",
    )
    bye = dialog.request("BYE", VIA, contact=CONTACT)
    assert bye.uri == "sip:strict.example.com"
    assert bye.headers.get_all("Route") == ["<sip:bob@h>"]


def test_lr_parameter_is_case_insensitive() -> None:
    dialog = Dialog.as_uas(
        inbound_invite(record_route=("<sip:p1.example.com;LR>",), contact="<sip:bob@h>"),
        "l",
    )
    bye = dialog.request("BYE", VIA, contact=CONTACT)
    assert bye.uri == "sip:bob@h"
    assert bye.headers.get_all("Route") == ["<sip:p1.example.com;LR>"]


def test_remote_cseq_ordering() -> None:
    dialog = Dialog.as_uas(inbound_invite(contact="<sip:bob@h>"), "l")

    def req(method: str, number: int) -> Request:
        return parse_request(
            f"{method} sip:app@192.0.2.1 SIP/2.0\r\n"
            "Via: SIP/2.0/UDP 192.0.2.20;branch=z9hG4bKx\r\n"
            "From: <sip:bob@example.net>;tag=remote1\r\n"
            "To: <sip:app@192.0.2.1>;tag=l\r\n"
            "Call-ID: dlg-uas@example.net\r\n"
            f"CSeq: {number} {method}\r\n\r\n"
        )

    assert dialog.remote_seq == 314
    # The ACK of the INVITE has the INVITE's number; lower-numbered ACKs are fine too
    # and never move the counter.
    assert dialog.accept_remote_cseq(req("ACK", 314))
    assert dialog.accept_remote_cseq(req("ACK", 1))
    assert dialog.remote_seq == 314
    # §12.2.2: lower than the remote sequence number -> out of order (500).
    assert not dialog.accept_remote_cseq(req("INFO", 313))
    assert dialog.remote_seq == 314
    assert dialog.accept_remote_cseq(req("INFO", 315))
    assert dialog.remote_seq == 315
    assert dialog.accept_remote_cseq(req("INVITE", 400))
    assert dialog.remote_seq == 400
    assert not dialog.accept_remote_cseq(req("BYE", 399))
    # CANCEL carries the number of the request it cancels: never moves the counter.
    assert dialog.accept_remote_cseq(req("CANCEL", 400))
    assert dialog.remote_seq == 400


def test_uac_dialog_accepts_any_first_remote_cseq() -> None:
    invite = outbound_invite()
    dialog = Dialog.as_uac(invite, ok_for(invite, (), contact="<sip:bob@h>"))
    bye = parse_request(
        "BYE sip:callhook@192.0.2.1 SIP/2.0\r\n"
        "Via: SIP/2.0/UDP h;branch=z9hG4bKy\r\n"
        "From: <sip:bob@example.net>;tag=remote2\r\n"
        "To: <sip:callhook@192.0.2.1:5060>;tag=local1\r\n"
        "Call-ID: dlg-uac@192.0.2.1\r\n"
        "CSeq: 7 BYE\r\n\r\n"
    )
    assert dialog.accept_remote_cseq(bye)
    assert dialog.remote_seq == 7


def test_target_refresh_moves_the_remote_target() -> None:
    dialog = Dialog.as_uas(inbound_invite(contact="<sip:bob@192.0.2.20:5070>"), "l")
    reinvite = parse_request(
        "INVITE sip:app@192.0.2.1 SIP/2.0\r\n"
        "Via: SIP/2.0/UDP 198.51.100.9;branch=z9hG4bKz\r\n"
        "From: <sip:bob@example.net>;tag=remote1\r\n"
        "To: <sip:app@192.0.2.1>;tag=l\r\n"
        "Call-ID: dlg-uas@example.net\r\n"
        "CSeq: 315 INVITE\r\n"
        'Contact: "Bob" <sip:bob@198.51.100.9:5062>;expires=60\r\n\r\n'
    )
    dialog.update_target(reinvite)
    assert dialog.remote_target == "sip:bob@198.51.100.9:5062"
    assert dialog.request("BYE", VIA, contact=CONTACT).uri == "sip:bob@198.51.100.9:5062"
    assert dialog.next_hop() == Target("198.51.100.9", 5062)
    without_contact = parse_request(
        "UPDATE sip:app@192.0.2.1 SIP/2.0\r\n"
        "Via: SIP/2.0/UDP 198.51.100.9;branch=z9hG4bKw\r\n"
        "From: <sip:bob@example.net>;tag=remote1\r\n"
        "To: <sip:app@192.0.2.1>;tag=l\r\n"
        "Call-ID: dlg-uas@example.net\r\n"
        "CSeq: 316 UPDATE\r\n\r\n"
    )
    dialog.update_target(without_contact)
    assert dialog.remote_target == "sip:bob@198.51.100.9:5062"


def test_request_with_extra_headers() -> None:
    dialog = Dialog.as_uas(inbound_invite(contact="<sip:bob@h>"), "l")
    req = dialog.request("BYE", VIA, contact=CONTACT, extra=[("Reason", "Q.850;cause=16")])
    assert req.headers.get("Reason") == "Q.850;cause=16"
    assert req.body == b""
    assert "Content-Type" not in req.headers
