"""The key ring (httpserver/keys.py): whose key a header's text is, whatever it holds."""

from __future__ import annotations

from callhook.httpserver.keys import KeyRing


def test_any_text_is_a_key_or_not_never_an_error() -> None:
    ring = KeyRing({"sales-key-0123456789abcdef": "sales", "clé-0123456789abcdef": "vente"})
    assert ring.app_for("sales-key-0123456789abcdef") == "sales"
    assert ring.app_for("clé-0123456789abcdef") == "vente"
    # aiohttp gives a header's bytes past UTF-8 as lone surrogates ("surrogateescape").
    for odd in ("\udcff\udcfe", "sales-key-0123456789abcde\udcff", "\ud800", ""):
        assert ring.app_for(odd) is None
    # The UTF-8 bytes of a key, read as surrogates, are still not that key's text.
    escaped = "clé-0123456789abcdef".encode().decode("ascii", "surrogateescape")
    assert ring.app_for(escaped) is None
