"""SIP message layer: the RFC 4475 torture messages, round trips, robustness and fuzzing.

(Header fields, URIs, Via, name-addr, framing and the checks in detail are in
``test_sip_syntax.py``.)

Every RFC 4475 message has an entry in ``CASES`` saying what the RFC's section asks of
an element like callhook (a user agent: not a proxy, not a registrar) and what this
parser therefore does: parse it (with the assertions the section cares about), reject
it in ``parse`` (SipMessageError and its status), reject it in ``check_request`` (the
status answered), or drop a response (``check_response``).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callhook.sip.checks import check_request, check_response, unsupported_options
from callhook.sip.message import (
    NameAddr,
    Request,
    Response,
    SipMessageError,
    SipUri,
    Via,
    parse,
    parse_name_addr,
    parse_uri,
    parse_via,
    serialize,
    unescape,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "sip" / "rfc4475"
# SHA-256 over (name, SHA-256 of content) of the 50 .dat files: they must stay byte-exact
# (CRLF line ends, binary body in mpart01), whatever git or an editor does to line ends.
DATA_DIGEST = "536c7a70e11406138e129f0fccc7978e909e6129abe5e3ee6a29e17123796360"

# callhook as a UAS: the methods its agent handles, its option tags, the bodies it reads.
UA_METHODS = frozenset({"INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "INFO", "UPDATE"})
UA_SUPPORTED = frozenset({"timer", "replaces"})
UA_TYPES = frozenset({"application/sdp", "application/dtmf-relay"})


def load(tag: str) -> bytes:
    return (DATA / f"{tag}.dat").read_bytes()


def addr(msg: Request | Response, name: str) -> list[NameAddr]:
    return [parse_name_addr(v) for v in msg.headers.get_all(name)]


def vias(msg: Request | Response) -> list[Via]:
    return [parse_via(v) for v in msg.headers.get_all("Via")]


def one(msg: Request | Response, name: str) -> NameAddr:
    value = msg.headers.get(name)
    assert value is not None, name
    return parse_name_addr(value)


# --- what each RFC 4475 section says matters ------------------------------------------


def v_wsinv(m: Request | Response) -> None:
    # §3.1.1.1: folding, escaped quotes, empty Subject, LWS everywhere, mixed short/long
    # forms, comma-separated and repeated Via, unknown fields kept, leading zeros.
    assert isinstance(m, Request) and m.method == "INVITE"
    assert m.uri == "sip:vivekg@chair-dnrc.example.com;unknownparam"
    assert m.parsed_uri.params == {"unknownparam": None}
    to = one(m, "To")
    assert to.display is None and str(to.uri) == "sip:vivekg@chair-dnrc.example.com"
    assert to.tag == "1918181833n" and m.to_tag == "1918181833n"
    frm = one(m, "From")
    assert frm.display == 'J Rosenberg \\"'  # "J Rosenberg \\\"" with quoted-pairs resolved
    assert frm.uri.user == "jdrosen" and m.from_tag == "98asjd8"
    assert int(m.headers.get("max-forwards") or "") == 68
    assert m.cseq == (9, "INVITE")
    assert [(v.transport, v.host, v.port, v.branch) for v in vias(m)] == [
        ("UDP", "192.0.2.2", None, "390skdjuw"),
        ("TCP", "spindle.example.com", None, "z9hG4bK9ikj8"),
        ("UDP", "192.168.255.111", None, "z9hG4bK30239"),
    ]
    assert m.branch == "390skdjuw"
    assert m.headers.get("Subject") == "" and m.headers.get("s") == ""
    assert m.headers.get("NewFangledHeader") == "newfangled value continued newfangled value"
    # Unknown field: one opaque value, never split at its commas or semicolons.
    assert m.headers.get_all("UnknownHeaderWithUnusualValue") == [";;,,;;,;"]
    route = one(m, "Route")
    assert route.uri.params == {"lr": None, "unknownwith": "value", "unknown-no-value": None}
    (contact,) = addr(m, "Contact")
    assert contact.display == 'Quoted string ""'
    assert contact.params == {"newparam": "newvalue", "secondparam": None, "q": "0.33"}
    assert m.headers.get("Content-Type") == "application/sdp"
    assert len(m.body) == 150 and m.body.startswith(b"v=0\r\n")


def v_intmeth(m: Request | Response) -> None:
    # §3.1.1.2: token characters in the method, unusual but legal Request-URI, a quoted
    # NUL in the To display name, token display name, UTF-8 values, word Call-ID.
    assert isinstance(m, Request)
    method = "!interesting-Method0123456789_*+`.%indeed'~"
    assert m.method == method and m.cseq == (139122385, method)
    uri = m.parsed_uri
    assert uri.user == "1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*"
    assert uri.password == "&it+has=1,weird!*pas$wo~d_too.(doesn't-it)"
    assert uri.host == "example.com" and uri.params == {} and uri.headers == {}
    assert m.branch == "z9hG4bK-.!%66*_+`'~"
    to = one(m, "To")
    assert to.display == "BEL:\x07 NUL:\x00 DEL:\x7f"
    assert to.uri.user == "1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*"
    frm = one(m, "From")
    assert frm.display == "token1~` token2'+_ token3*%!.-"
    assert frm.params == {"fromparam''~+*_!.-%": '"работающий"', "tag": "_token~1'+`*%!-."}
    assert m.call_id == "intmeth.word%ZK-!.*_+'@word`~)(><:\\/\"][?}{"
    assert m.headers.get("extensionHeader-!.%*+_`'~") == "\ufeff大停電"


def v_esc01(m: Request | Response) -> None:
    # §3.1.1.3: %HH kept as received; unescaping is once only ("value%41" stays so).
    assert isinstance(m, Request)
    uri = m.parsed_uri
    assert uri.user == "sips%3Auser%40example.com" and uri.host == "example.net"
    assert unescape(uri.user) == "sips:user@example.com"
    assert unescape(one(m, "To").uri.user or "") == "user"
    assert unescape(one(m, "From").uri.user or "") == "I have spaces"
    (contact,) = addr(m, "Contact")
    assert unescape(contact.uri.user or "") == "caller"
    assert contact.uri.params == {"%6c%72": None, "n%61me": "v%61lue%25%34%31"}
    assert unescape("n%61me") == "name" and unescape("v%61lue%25%34%31") == "value%41"
    assert m.call_id == "esc01.239409asdfakjkn23onasd0-3234"  # i:
    assert m.headers.get("Content-Type") == "application/sdp"  # C:


def v_escnull(m: Request | Response) -> None:
    # §3.1.1.4: escaped NULs must not shorten the user part; two distinct Contacts.
    assert isinstance(m, Request) and m.method == "REGISTER"
    assert one(m, "To").uri.user == "null-%00-null"
    assert unescape("null-%00-null") == "null-\x00-null"
    users = [a.uri.user or "" for a in addr(m, "Contact")]
    assert users == ["%00", "%00%00"]
    assert [unescape(u) for u in users] == ["\x00", "\x00\x00"]
    assert m.headers.get("Content-Length") == "0"  # L:0


def v_esc02(m: Request | Response) -> None:
    # §3.1.1.5: % is not an escape in methods, display names, field names or branches.
    assert isinstance(m, Request)
    assert m.method == "RE%47IST%45R" and m.cseq == (29344, "RE%47IST%45R")
    assert one(m, "To").display == "%Z%45" and one(m, "From").display == "%Z%45"
    assert [a.uri.host for a in addr(m, "Contact")] == ["host1.example.com", "host3.example.com"]
    assert m.headers.get("C%6Fntact") == "<sip:alias2@host2.example.com>"
    assert m.branch == "z9hG4bK209%fzsnel234"


def v_lwsdisp(m: Request | Response) -> None:
    # §3.1.1.6: no LWS between the display name and <.
    frm = one(m, "From")
    assert frm.display == "caller" and frm.uri.user == "caller" and frm.tag == "323"


def v_longreq(m: Request | Response) -> None:
    # §3.1.1.7: long values and many Via values.
    to = one(m, "To")
    assert to.display == f"I have a user name of {'extreme' * 10} proportion"
    assert to.uri.port == 6000
    assert to.uri.params == {
        "unknownparam1": f"very{'long' * 20}value",
        f"longparam{'name' * 25}": "shortvalue",
        f"very{'long' * 25}parameternamewithnovalue": None,
    }
    frm = one(m, "From")
    assert frm.uri.user == "amazinglylongcallername" * 5
    assert frm.tag == f"12{'982' * 50}424" and len(frm.params) == 3
    assert m.call_id == f"longreq.one{'really' * 20}longcallid"
    name = f"Unknown-{'Long' * 20}-Name"
    assert (m.headers.get(name) or "").startswith("unknown-long")
    hops = vias(m)
    assert len(hops) == 34
    assert [v.host for v in hops[:33]] == [f"sip{n}.example.com" for n in range(33, 0, -1)]
    assert hops[33].params == {
        "received": "192.0.2.5",
        "branch": f"very{'long' * 50}branchvalue",
    }
    assert len(addr(m, "Contact")) == 1 and len(m.body) == 150


def v_dblreq(m: Request | Response) -> None:
    # §3.1.1.8: the INVITE-looking octets after the REGISTER are noise (§18.3).
    assert isinstance(m, Request) and m.method == "REGISTER" and m.body == b""
    assert m.call_id == "dblreq.0ha0isndaksdj99sdfafnl3lk233412"
    assert b"INVITE" not in serialize(m)


def v_semiuri(m: Request | Response) -> None:
    # §3.1.1.9: the user part is "user;par=u@example.net"; folded Accept list.
    assert isinstance(m, Request)
    uri = m.parsed_uri
    assert uri.user == "user;par=u%40example.net" and uri.host == "example.com"
    assert unescape(uri.user) == "user;par=u@example.net" and uri.params == {}
    assert m.headers.get_all("Accept") == [
        "application/sdp",
        "application/pkcs7-mime",
        "multipart/mixed",
        "multipart/signed",
        "message/sip",
        "message/sipfrag",
    ]


def v_transports(m: Request | Response) -> None:
    # §3.1.1.10: all transports, including an unknown one.
    assert [v.transport for v in vias(m)] == ["UDP", "SCTP", "TLS", "UNKNOWN", "TCP"]
    assert m.call_id == "transports.kijh4akdnaqjkwendsasfdj"


def v_mpart01(m: Request | Response) -> None:
    # §3.1.1.11: a multipart body with a binary part holding NULs, framed exactly.
    assert isinstance(m, Request) and m.method == "MESSAGE"
    assert len(m.body) == 553 and b"\x00" in m.body
    assert m.body.startswith(b"--7a9cbec02ceef655\r\n")
    assert m.body.endswith(b"--7a9cbec02ceef655--\r\n")
    assert m.headers.get("Content-Type") == "multipart/mixed;boundary=7a9cbec02ceef655"
    via = m.top_via
    assert via.port == 5070 and via.params["rport"] is None
    assert via.branch == "z9hG4bK-d87543-4dade06d0bdb11ee-1--d87543-"


def v_unreason(m: Request | Response) -> None:
    # §3.1.1.12: a UTF-8 reason phrase.
    assert isinstance(m, Response) and m.status == 200
    assert m.reason == "= 2**3 * 5**2 но сто девяносто девять - простое"
    assert len(m.body) == 154


def v_noreason(m: Request | Response) -> None:
    # §3.1.1.13: an empty reason phrase.
    assert isinstance(m, Response) and m.status == 100 and m.reason == ""


def canonical_start(line: bytes) -> Callable[[Request | Response], None]:
    # §3.1.2.9, §3.1.2.10: accepted liberally; what is sent on has single SPs.
    def verify(m: Request | Response) -> None:
        assert serialize(m).startswith(line + b"\r\n")

    return verify


def v_baddate(m: Request | Response) -> None:
    # §3.1.2.12: a UA does not use Date; the value is kept, never split at its comma.
    assert m.headers.get_all("Date") == ["Fri, 01 Jan 2010 16:00:00 EST"]


def v_badaspec(m: Request | Response) -> None:
    # §3.1.2.14: accepted liberally, the spaces inside <> ignored.
    to = one(m, "To")
    assert to.display == "Watson, Thomas" and str(to.uri) == "sip:t.watson@example.org"
    assert one(m, "From").display == "Bell, Alexander"


def v_badbranch(m: Request | Response) -> None:
    assert m.branch == "z9hG4bK"  # §3.2.1: parsed, then refused by check_request


def v_unkscm(m: Request | Response) -> None:
    assert isinstance(m, Request)
    assert m.parsed_uri == SipUri("nobodyknowsthisscheme", opaque="totallyopaquecontent")


def v_novelsc(m: Request | Response) -> None:
    assert isinstance(m, Request) and m.parsed_uri.scheme == "soap.beep"


def v_unksm2(m: Request | Response) -> None:
    # §3.3.4: registered but non-SIP schemes in To, From and Contact parse.
    assert str(one(m, "To").uri) == "isbn:2983792873"
    assert str(one(m, "From").uri) == "http://www.example.com" and m.from_tag == "3234233"
    assert [str(a.uri) for a in addr(m, "Contact")] == ["name:John_Smith"]


def v_bext01(m: Request | Response) -> None:
    # §3.3.5: the 420 lists the Require tags; Proxy-Require is for proxies only.
    assert isinstance(m, Request)
    assert unsupported_options(m, UA_SUPPORTED) == [
        "nothingSupportsThis",
        "nothingSupportsThisEither",
    ]


def v_regaut01(m: Request | Response) -> None:
    assert m.headers.get("Authorization") == "NoOneKnowsThisScheme opaque-data=here"


def v_multi01(m: Request | Response) -> None:
    for name in ("Call-ID", "To", "From", "Max-Forwards", "CSeq"):
        assert m.headers.count(name) == 2


def v_bcast(m: Request | Response) -> None:
    assert [v.host for v in vias(m)] == ["192.0.2.198", "255.255.255.255"]


def v_zeromf(m: Request | Response) -> None:
    assert m.headers.get("Max-Forwards") == "0"


def v_cparam01(m: Request | Response) -> None:
    # §3.3.12: unbracketed, so "unknownparam" is a contact-param, not a URI parameter.
    (contact,) = addr(m, "Contact")
    assert contact.params == {"unknownparam": None} and contact.uri.params == {}


def v_cparam02(m: Request | Response) -> None:
    # §3.3.13: bracketed, so "unknownparam" is a URI parameter.
    (contact,) = addr(m, "Contact")
    assert contact.params == {} and contact.uri.params == {"unknownparam": None}


def v_regescrt(m: Request | Response) -> None:
    # §3.3.14: the escaped Route header stays in the Contact URI.
    (contact,) = addr(m, "Contact")  # M:
    assert contact.uri.headers == {"Route": "%3Csip:sip.example.com%3E"}
    assert unescape(contact.uri.headers["Route"]) == "<sip:sip.example.com>"


def v_sdp01(m: Request | Response) -> None:
    assert m.headers.get_all("Accept") == ["text/nobodyKnowsThis"]


def v_inv2543(m: Request | Response) -> None:
    # §3.4.1: no branch, no From tag, no Max-Forwards, no Content-Length: the body is
    # the rest of the datagram.
    assert isinstance(m, Request)
    assert m.branch is None and m.from_tag is None
    assert "Content-Length" not in m.headers and "Max-Forwards" not in m.headers
    assert m.body == load("inv2543").split(b"\r\n\r\n", 1)[1] and len(m.body) == 105
    assert one(m, "Record-Route").uri.params == {"maddr": "ss1.example.com"}


@dataclass(frozen=True)
class Case:
    """What RFC 4475 asks for one message, as callhook (a UA) resolves it."""

    section: str
    parse_status: int | None = None  # parse raises SipMessageError with this status
    check: int | None = None  # check_request's status; None: the request is processed
    discard: bool = False  # check_response says to drop the response
    verify: Callable[[Request | Response], None] | None = None


CASES: dict[str, Case] = {
    # 3.1.1 valid messages: a parser must accept them.
    "wsinv": Case("3.1.1.1", verify=v_wsinv),
    "intmeth": Case("3.1.1.2", check=501, verify=v_intmeth),  # "Endpoints will generate a 501"
    "esc01": Case("3.1.1.3", verify=v_esc01),
    "escnull": Case("3.1.1.4", check=405, verify=v_escnull),  # REGISTER: callhook is no registrar
    "esc02": Case("3.1.1.5", check=501, verify=v_esc02),  # "An endpoint would reject ... 501"
    "lwsdisp": Case("3.1.1.6", verify=v_lwsdisp),
    "longreq": Case("3.1.1.7", verify=v_longreq),
    "dblreq": Case("3.1.1.8", check=405, verify=v_dblreq),
    "semiuri": Case("3.1.1.9", verify=v_semiuri),
    "transports": Case("3.1.1.10", verify=v_transports),
    "mpart01": Case("3.1.1.11", check=405, verify=v_mpart01),  # MESSAGE is not implemented
    "unreason": Case("3.1.1.12", verify=v_unreason),
    "noreason": Case("3.1.1.13", verify=v_noreason),
    # 3.1.2 invalid messages.
    "badinv01": Case("3.1.2.1", check=400),  # empty Via and Contact parameters
    "clerr": Case("3.1.2.2", parse_status=400),  # Content-Length 9999 > body, over UDP
    "ncl": Case("3.1.2.3", parse_status=400),  # Content-Length: -999
    "scalar02": Case("3.1.2.4", check=400),  # "400 Bad Request due to the CSeq error"
    "scalarlg": Case("3.1.2.5", discard=True),  # "will simply discard it"
    "quotbal": Case("3.1.2.6", check=400),
    "ltgtruri": Case("3.1.2.7", parse_status=400),
    "lwsruri": Case("3.1.2.8", parse_status=400),
    "lwsstart": Case("3.1.2.9", verify=canonical_start(b"INVITE sip:user@example.com SIP/2.0")),
    "trws": Case(
        "3.1.2.10", verify=canonical_start(b"OPTIONS sip:remote-target@example.com SIP/2.0")
    ),
    "escruri": Case("3.1.2.11", check=400),  # headers in the Request-URI
    "baddate": Case("3.1.2.12", verify=v_baddate),  # ignored: Date does not matter to a UA
    "regbadct": Case("3.1.2.13", check=400),  # URI with ? outside <>
    "badaspec": Case("3.1.2.14", verify=v_badaspec),  # liberal: no ambiguity
    "baddn": Case("3.1.2.15", check=400),  # unquoted display name with a comma
    "badvers": Case("3.1.2.16", parse_status=505),
    "mismatch01": Case("3.1.2.17", check=400),
    "mismatch02": Case("3.1.2.18", check=501),  # 501 preferred over 400
    "bigcode": Case("3.1.2.19", parse_status=400),  # a response: dropped, never answered
    # 3.2 transaction layer.
    "badbranch": Case("3.2.1", check=400, verify=v_badbranch),
    # 3.3 application layer.
    "insuf": Case("3.3.1", check=400),
    "unkscm": Case("3.3.2", check=416, verify=v_unkscm),
    "novelsc": Case("3.3.3", check=416, verify=v_novelsc),
    "unksm2": Case("3.3.4", check=405, verify=v_unksm2),
    "bext01": Case("3.3.5", check=420, verify=v_bext01),
    "invut": Case("3.3.6", check=415),
    "regaut01": Case("3.3.7", check=405, verify=v_regaut01),  # "A 405 ... is appropriate"
    "multi01": Case("3.3.8", check=400, verify=v_multi01),
    "mcl01": Case("3.3.9", parse_status=400),
    "bcast": Case("3.3.10", discard=True, verify=v_bcast),
    "zeromf": Case("3.3.11", verify=v_zeromf),  # an endpoint processes it
    "cparam01": Case("3.3.12", check=405, verify=v_cparam01),
    "cparam02": Case("3.3.13", check=405, verify=v_cparam02),
    "regescrt": Case("3.3.14", check=405, verify=v_regescrt),
    "sdp01": Case("3.3.15", check=406, verify=v_sdp01),
    # 3.4 backward compatibility.
    "inv2543": Case("3.4.1", verify=v_inv2543),
    # Not in RFC 4475: reSIProcate's extra file (request line without a SIP version).
    "test": Case("-", parse_status=400),
}
PARSEABLE = sorted(tag for tag, case in CASES.items() if case.parse_status is None)


def test_data_is_complete_and_byte_exact() -> None:
    files = sorted(p.stem for p in DATA.glob("*.dat"))
    assert files == sorted(CASES) and len(files) == 50
    digest = hashlib.sha256()
    for path in sorted(DATA.glob("*.dat")):
        digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    assert digest.hexdigest() == DATA_DIGEST
    assert "ATTRIBUTION" in (DATA / "README.md").read_text()


@pytest.mark.parametrize("tag", sorted(CASES))
def test_rfc4475(tag: str) -> None:
    case = CASES[tag]
    data = load(tag)
    if case.parse_status is not None:
        with pytest.raises(SipMessageError) as info:
            parse(data)
        exc = info.value
        assert exc.status == case.parse_status, exc.reason
        assert exc.is_request == (tag != "bigcode")
        if exc.is_request and tag != "test":
            # Enough was read to answer it (RFC 3261 §8.2.6.2).
            assert exc.headers is not None
            assert all(exc.headers.get(n) for n in ("Via", "From", "To", "Call-ID", "CSeq"))
        return
    msg = parse(data)
    if case.verify is not None:
        case.verify(msg)
    if isinstance(msg, Request):
        assert not case.discard
        problem = check_request(msg, UA_SUPPORTED, methods=UA_METHODS, content_types=UA_TYPES)
        assert (problem[0] if problem else None) == case.check, problem
    else:
        assert case.check is None
        assert (check_response(msg) is not None) == case.discard


def test_rfc4475_reasons_name_the_cause() -> None:
    def rejection(tag: str) -> tuple[int, str] | None:
        msg = parse(load(tag))
        assert isinstance(msg, Request)
        return check_request(msg, UA_SUPPORTED, methods=UA_METHODS, content_types=UA_TYPES)

    assert rejection("insuf") == (400, "Bad Request (missing To, From, Call-ID)")
    assert rejection("unkscm") == (416, "Unsupported URI Scheme (nobodyknowsthisscheme)")
    assert rejection("mismatch01") == (400, "Bad Request (CSeq method INVITE is not OPTIONS)")
    assert rejection("bext01") == (
        420,
        "Bad Extension (nothingSupportsThis, nothingSupportsThisEither)",
    )
    assert rejection("invut") == (415, "Unsupported Media Type (application/unknownformat)")
    with pytest.raises(SipMessageError, match="Content-Length 9999 is larger than the body"):
        parse(load("clerr"))
    with pytest.raises(SipMessageError, match="conflicting Content-Length values 5 and 13"):
        parse(load("mcl01"))
    with pytest.raises(SipMessageError, match=r"SIP version SIP/7\.0 is not supported"):
        parse(load("badvers"))


def test_uas_without_method_list_does_not_judge_methods() -> None:
    # Without ``methods`` only syntax and semantics are checked (a registrar's view).
    for tag in ("escnull", "cparam01", "cparam02", "regescrt", "regaut01", "intmeth"):
        msg = parse(load(tag))
        assert isinstance(msg, Request)
        assert check_request(msg) is None, tag


@pytest.mark.parametrize("tag", PARSEABLE)
def test_round_trip(tag: str) -> None:
    msg = parse(load(tag))
    wire = serialize(msg)
    again = parse(wire)
    assert again.body == msg.body
    if isinstance(msg, Request):
        assert isinstance(again, Request)
        assert (again.method, again.uri, again.version) == (msg.method, msg.uri, msg.version)
    else:
        assert isinstance(again, Response)
        assert (again.status, again.reason) == (msg.status, msg.reason)
    expected = msg.headers.copy()
    expected.set("Content-Length", str(len(msg.body)))
    assert again.headers == expected
    assert serialize(again) == wire
    assert wire.count(b"\r\n\r\n") >= 1 and b"\n" not in wire.split(b"\r\n\r\n")[0].replace(
        b"\r\n", b""
    )


# --- robustness: only SipMessageError, whatever comes in -------------------------------


def robust(data: bytes) -> None:
    """parse raises nothing but SipMessageError; what it returns serialises and round-trips,
    and the checks and properties hold up."""
    try:
        msg = parse(data)
    except SipMessageError as exc:
        assert exc.reason and 100 <= exc.status <= 699
        return
    wire = serialize(msg)
    again = parse(wire)
    assert again.body == msg.body and serialize(again) == wire
    if isinstance(msg, Request):
        check_request(msg, UA_SUPPORTED, methods=UA_METHODS, content_types=UA_TYPES)
        check_request(msg)
    else:
        check_response(msg)
    assert msg.branch is None or isinstance(msg.branch, str)
    assert msg.from_tag is None or isinstance(msg.from_tag, str)
    assert msg.to_tag is None or isinstance(msg.to_tag, str)
    for prop in ("call_id", "cseq", "top_via", "parsed_uri"):
        with contextlib.suppress(SipMessageError):
            getattr(msg, prop, None)
    for name in ("Via", "Contact", "From", "To", "Route", "Record-Route"):
        for value in msg.headers.get_all(name):
            for parser in (parse_via, parse_name_addr, parse_uri):
                with contextlib.suppress(SipMessageError):
                    parser(value)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\r\n",
        b"\r\n\r\n\r\n",
        b"\n",
        b"\x00" * 100,
        b"SIP/",
        b"INVITE",
        b" \r\n\r\n",
        b":\r\n\r\n",
        b"\xff\xfe\xfd\r\n\r\n",
        b"OPTIONS sip:a@b SIP/2.0\r\n" + b"X: y\r\n" * 20000 + b"\r\n",
        b"OPTIONS sip:a@b SIP/2.0\r\nSubject: " + b"a" * 60000 + b"\r\n\r\n",
        b"OPTIONS sip:a@b SIP/2.0\r\nVia: " + b"," * 30000 + b"\r\n\r\n",
        b"OPTIONS sip:a@b SIP/2.0\r\nContact: " + b'"' * 30000 + b"\r\n\r\n",
        b"OPTIONS sip:a@b SIP/2.0\r\nSubject: \xc3\x28 \xff\r\n\r\n",
    ],
)
def test_garbage_only_raises_sip_message_error(data: bytes) -> None:
    robust(data)


def test_huge_header_count_parses() -> None:
    data = b"OPTIONS sip:a@b SIP/2.0\r\n" + b"Via: SIP/2.0/UDP h;branch=z9hG4bK1\r\n" * 5000
    msg = parse(data + b"\r\n")
    assert len(msg.headers.get_all("Via")) == 5000


def test_non_utf8_bytes_survive_a_round_trip() -> None:
    data = b"OPTIONS sip:a@b SIP/2.0\r\nSubject: caf\xe9\r\nContent-Length: 0\r\n\r\n"
    assert serialize(parse(data)) == data


def test_random_bytes() -> None:
    rng = random.Random(4475)
    for _ in range(2000):
        robust(rng.randbytes(rng.randrange(0, 300)))


TORTURE = [load(tag) for tag in sorted(CASES)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=1500))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    robust(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(TORTURE),
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=4000),
            st.integers(min_value=0, max_value=8),
            st.sampled_from([b"", b"\r\n", b" ", b",", b";", b":", b'"', b"<", b">", b"\x00"]),
        ),
        max_size=6,
    ),
)
def test_fuzz_mutated_torture_messages(base: bytes, edits: list[tuple[int, int, bytes]]) -> None:
    data = bytearray(base)
    for pos, cut, insert in edits:
        at = pos % (len(data) + 1)
        data[at : at + cut] = insert
    robust(bytes(data))
