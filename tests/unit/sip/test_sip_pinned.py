"""An outbound call pinned to its first hop (callhook/sip/uac.py ``pinned``): a phone
registered from behind a NAT is reached where its REGISTER came from, for every request
of the dialog, not at the private Contact its 200 names."""

from __future__ import annotations

from callhook.sip.agent import Agent
from callhook.sip.transport import Target
from tests.unit.sip.test_sip_agent import ANSWER, HOST, OFFER, PORT, T0, one_request, reply


def test_a_pinned_call_sends_every_request_where_its_invite_went() -> None:
    """A registered phone behind a NAT (RFC 5626 §5.3's flow): the 200's Contact is a
    private address; the ACK and the BYE still go where the INVITE went."""
    agent = Agent(HOST, PORT)
    nat = Target("198.51.100.7", 40123)
    call_id = agent.invite("sip:alice@192.168.1.10:5060", OFFER, T0, address=nat, pinned=True)
    invite, address = one_request(agent)
    assert address == nat
    ok = reply(invite, 200, contact="<sip:alice@192.168.1.10:5060>", body=ANSWER)
    agent.receive(ok, nat, T0 + 1)
    ack, ack_to = one_request(agent)
    assert ack.method == "ACK" and ack.uri == "sip:alice@192.168.1.10:5060" and ack_to == nat
    agent.hang_up(call_id, T0 + 5)
    bye, bye_to = one_request(agent)
    assert bye.method == "BYE" and bye_to == nat
    # Unpinned (a trunk's proxy), the dialog's remote target is followed, as §12.2.1.1 says.
    agent.invite("sip:bob@192.168.1.20:5060", OFFER, T0 + 6, address=nat)
    invite, _ = one_request(agent)
    agent.receive(reply(invite, 200, contact="<sip:bob@192.0.2.30:5090>", body=ANSWER), nat, T0 + 7)
    _, ack_to = one_request(agent)
    assert ack_to == Target("192.0.2.30", 5090)
