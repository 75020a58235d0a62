"""Digest authentication of callhook's users' phones (RFC 3261 §22.4, RFC 7616, RFC 8760). Sans-IO.

Theory of operation
-------------------
callhook challenges the phones of ``[users.NAME]`` when they REGISTER
(``registrar.py``) and when they call in: :meth:`Authenticator.check` reads a
request's ``Authorization`` (or ``Proxy-Authorization``) and says one of

* ``ok``: the digest is right, for ``user``;
* ``challenge``: no usable credentials (none, another scheme or realm, an
  algorithm we do not offer, a nonce that is not ours): answer 401 with fresh
  challenges; not a failure (every phone's first request is so);
* ``stale``: the digest is right but its nonce has expired: 401 with
  ``stale=true`` (RFC 7616 §3.3), so the phone answers again without asking
  its user; not a failure;
* ``wrong``: the digest is wrong, or names a user that does not exist: 403,
  and a failure the guard counts towards a ban (``guard.py``).

Nonces are stateless and unforgeable: ``<time>.<salt>.<HMAC-SHA256(key,
time.salt)>`` with ``time`` the agent's clock in milliseconds (hex) and a
random salt, so no table of issued nonces can be filled by a flood; one is good
for :data:`NONCE_SECONDS`. The key is derived from the installation's secret,
so nonces survive a restart of ``serve`` (the clock is the monotonic one the
adapter gives, which runs on across restarts until the machine reboots; a nonce
from the "future" is simply not ours). Nonce counts (``nc``) are not tracked:
a captured request can be replayed while its nonce lives (RFC 7616 §5.11
leaves counting optional); a REGISTER replayed so only refreshes what it said.

Challenges are offered for the configured algorithms (``[security]
digest_algorithms``: MD5 and SHA-256, RFC 8760), one ``WWW-Authenticate`` each
in the order given (RFC 8760 §2.4: most preferred first), each with
``qop="auth"``; credentials in RFC 2069 form (no ``qop``) are accepted too.
The default is MD5 alone: phones still in wide use fail on any SHA-256
challenge even beside an MD5 one (baresip 1.0 with its libre refuses the whole
401, ``ENOSYS``), or answer only the first challenge and know only MD5 (SIPp
3.6). Unknown user names get the same challenge as
known ones and the same 403 when their digest is wrong, so answers reveal
nothing about which users exist (DESIGN.md §5).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from callhook.sip import digest
from callhook.sip.message import Request

#: How long a nonce is good for (seconds); a phone answering later gets ``stale=true``.
NONCE_SECONDS = 300.0
#: The algorithms callhook can check (RFC 8760).
ALGORITHMS = ("MD5", "SHA-256")
#: The algorithms offered when the configuration does not say (see the module docstring).
DEFAULT_ALGORITHMS = ("MD5",)
#: Our realm (RFC 3261 §22.1: the phones show it; it keys their stored credentials).
REALM = "callhook"

Outcome = Literal["ok", "challenge", "stale", "wrong"]


@dataclass(frozen=True)
class Verdict:
    """What :meth:`Authenticator.check` found: the outcome, the user it is about (the
    credentials' username, when there were credentials), and why (for the log)."""

    outcome: Outcome
    user: str = ""
    why: str = ""


class Authenticator:
    """Challenges and checks digest credentials of the configured users."""

    def __init__(
        self,
        users: Mapping[str, str],
        key: bytes,
        realm: str = REALM,
        algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS,
    ) -> None:
        """``users``: name -> password; ``key``: the nonces' HMAC key (keep it secret);
        ``algorithms``: those offered, most preferred first (some of :data:`ALGORITHMS`)."""
        self.users = users
        self.realm = realm
        self.algorithms = algorithms
        self._key = key

    def challenges(self, now: float, *, stale: bool = False) -> list[str]:
        """``WWW-Authenticate`` values for a 401, a fresh nonce in each."""
        return [
            digest.challenge(self.realm, self.nonce(now), a, stale=stale) for a in self.algorithms
        ]

    def nonce(self, now: float) -> str:
        """A new nonce stamped with ``now``."""
        stamp = f"{max(0, int(now * 1000)):x}.{secrets.token_hex(6)}"
        return f"{stamp}.{self._mac(stamp)}"

    def _mac(self, stamp: str) -> str:
        return hmac.new(self._key, stamp.encode(), hashlib.sha256).hexdigest()[:32]

    def _nonce_age(self, nonce: str, now: float) -> float | None:
        """How old ``nonce`` is, or None when it is not one of ours."""
        stamp, _, mac = nonce.rpartition(".")
        if not stamp or not hmac.compare_digest(mac, self._mac(stamp)):
            return None
        try:
            issued = int(stamp.partition(".")[0], 16) / 1000
        except ValueError:
            return None
        age = now - issued
        return age if age >= -1.0 else None  # from the future: not this clock's

    def check(self, request: Request, now: float) -> Verdict:
        """Whether ``request`` carries right credentials (see the module docstring)."""
        values = request.headers.get_all("Authorization") + request.headers.get_all(
            "Proxy-Authorization"
        )
        params: dict[str, str] | None = None
        for value in values:
            try:
                found = digest.parse_credentials(value)
            except digest.DigestError:
                continue
            if found.get("realm") == self.realm:
                params = found
                break
        if params is None:
            return Verdict("challenge", why="no credentials for our realm")
        user = params["username"]
        algorithm = params.get("algorithm", "MD5")
        if algorithm.upper() not in self.algorithms:
            return Verdict("challenge", user, f"algorithm {algorithm[:20]!r} not offered")
        qop = params.get("qop")
        if qop is not None and qop.lower() != "auth":
            return Verdict("challenge", user, f"qop {qop[:20]!r} not offered")
        age = self._nonce_age(params["nonce"], now)
        if age is None:
            return Verdict("challenge", user, "a nonce that is not ours")
        password = self.users.get(user)
        # An unknown user's digest is computed against a random password, so that the
        # answer costs the same and says the same as a wrong password's.
        expected = digest.response(
            algorithm,
            user,
            self.realm,
            password if password is not None else secrets.token_hex(16),
            request.method,
            params["uri"],
            params["nonce"],
            qop="auth" if qop is not None else None,
            nc=params.get("nc", ""),
            cnonce=params.get("cnonce", ""),
        )
        if password is None or not hmac.compare_digest(
            expected.encode(), params["response"].lower().encode()
        ):
            return Verdict("wrong", user, "wrong credentials")
        if age > NONCE_SECONDS:
            return Verdict("stale", user, "the nonce expired")
        return Verdict("ok", user)
