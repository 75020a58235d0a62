"""The REST API's keys and the application each belongs to (:mod:`callhook.httpserver.restapi`
asks who is asking with them). Apart from the API itself so that ``serve``'s supervisor
checks the keys at start-up without loading the call-handling stack."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from callhook.config.settings import AppConfig


class KeyRing:
    """API keys and the application each one belongs to."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        # Keys are kept as digests of one length, so comparing them takes the same
        # time whatever the guess; every key is compared (no early exit).
        self._keys = [(hashlib.sha256(k.encode()).digest(), app) for k, app in keys.items()]

    def __len__(self) -> int:
        return len(self._keys)

    def replace(self, other: KeyRing) -> None:
        """Take ``other``'s keys (a reloaded config): every holder of this ring sees them."""
        self._keys = other._keys

    def app_for(self, key: str) -> str | None:
        """The application whose key ``key`` is (None: no such key, whatever ``key`` holds)."""
        # (A header of bytes past UTF-8 comes as lone surrogates: no key, not an error.)
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        found = None
        for known, app in self._keys:
            if hmac.compare_digest(digest, known):
                found = app
        return found

    def signing_key(self, app: str) -> bytes | None:
        """A key derived from ``app``'s API key, for what callhook signs on its behalf
        (web clients' tokens: :mod:`callhook.telephony.webrtctoken`); None if it has no key. A new
        API key makes everything signed under the old one invalid."""
        for known, name in self._keys:
            if name == app:
                return hmac.new(known, b"callhook web client token", "sha256").digest()
        return None


def key_ring(apps: Mapping[str, AppConfig], default: tuple[str, str] | None = None) -> KeyRing:
    """The keys of ``apps`` that have one, and ``default`` ``(app name, key)`` (the demo's).

    Raises ValueError if two applications would share a key.
    """
    keys: dict[str, str] = {}
    pairs = [(app.name, app.api_key) for app in apps.values() if app.api_key]
    if default is not None:
        pairs.append(default)
    for name, key in pairs:
        assert key is not None
        if keys.get(key, name) != name:
            raise ValueError(f"applications {keys[key]!r} and {name!r} have the same API key")
        keys[key] = name
    return KeyRing(keys)
