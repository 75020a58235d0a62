"""Web clients' tokens (callhook/telephony/webrtctoken.py): what signs in and what does not, on a
clock the test gives."""

from __future__ import annotations

import jwt
import pytest

from callhook.httpserver.keys import KeyRing
from callhook.telephony import webrtctoken
from callhook.telephony.webrtctoken import BadToken, check, mint

KEY = b"k" * 32
NOW = 1_800_000_000.0


def test_a_token_grants_its_client_id_of_its_application_until_it_expires() -> None:
    token = mint(KEY, "ivr", "agent-7", NOW, ttl=600)
    assert webrtctoken.audience(token) == "ivr"
    grant = check(token, KEY, "ivr", NOW + 599.9)
    assert (grant.app, grant.client_id, grant.incoming) == ("ivr", "agent-7", True)
    assert grant.expires == NOW + 600
    with pytest.raises(BadToken, match="expired"):
        check(token, KEY, "ivr", NOW + 600)
    check(token, KEY, "ivr", NOW - webrtctoken.LEEWAY)  # another node's clock a bit behind
    with pytest.raises(BadToken, match="not valid yet"):
        check(token, KEY, "ivr", NOW - webrtctoken.LEEWAY - 1)


def test_aculabs_claims_and_the_incoming_flag() -> None:
    token = mint(KEY, "ivr", "agent-7", NOW, incoming=False, call_client=("sup*",))
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "agent-7" and claims["scope"] == ["webrtcclient"]
    assert claims["exp"] - claims["iat"] == webrtctoken.TTL_DEFAULT
    assert claims["call_client"] == ["sup*"]
    assert check(token, KEY, "ivr", NOW).incoming is False


@pytest.mark.parametrize("ttl", [599, 86401, 0, -5])
def test_a_ttl_outside_aculabs_bounds_is_refused(ttl: int) -> None:
    with pytest.raises(ValueError, match="between 600 and 86400"):
        mint(KEY, "ivr", "agent-7", NOW, ttl)


def test_another_key_another_application_or_a_forgery_is_refused() -> None:
    token = mint(KEY, "ivr", "agent-7", NOW)
    with pytest.raises(BadToken, match="not valid"):
        check(token, b"x" * 32, "ivr", NOW)
    with pytest.raises(BadToken, match="not valid"):
        check(token, KEY, "sales", NOW)
    head, body, _ = token.split(".")
    with pytest.raises(BadToken):
        check(f"{head}.{body}.{'A' * 43}", KEY, "ivr", NOW)
    unscoped = jwt.encode({"sub": "a", "aud": "ivr", "exp": NOW + 9, "nbf": NOW}, KEY)
    with pytest.raises(BadToken, match="not a web client's"):
        check(unscoped, KEY, "ivr", NOW)
    with pytest.raises(BadToken, match="malformed"):
        webrtctoken.audience("not a token")
    with pytest.raises(BadToken, match="no application"):
        webrtctoken.audience(jwt.encode({"sub": "a"}, KEY))


def test_the_signing_key_is_the_applications_and_changes_with_its_api_key() -> None:
    ring = KeyRing({"key-one-0123456789": "ivr", "key-two-0123456789": "sales"})
    ivr, sales = ring.signing_key("ivr"), ring.signing_key("sales")
    assert ivr is not None and sales is not None and ivr != sales
    assert ring.signing_key("nobody") is None
    assert KeyRing({"another-key-012345": "ivr"}).signing_key("ivr") != ivr
    assert ivr not in (b"key-one-0123456789",)  # derived, not the key itself
