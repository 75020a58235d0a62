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
  and a failure the guard counts towards a ban (``guard.py``);
* ``bad``: the credentials' ``uri`` is not the request's Request-URI: 400
  (RFC 7616 §3.4.6); not a failure (no password was tried).

:meth:`Authenticator.check` never raises, whatever the peer sent: anything it
cannot read is no usable credentials.

Nonces are unforgeable and need no table of issued ones (a flood cannot fill
it): ``<boot>.<time>.<salt>.<HMAC-SHA256(key, boot.time.salt)>`` with ``boot``
random for each start of ``serve``, ``time`` the agent's clock in milliseconds
(hex) and a random salt; one is good for :data:`NONCE_SECONDS`. The key is
derived from the installation's secret, so a nonce from before a restart is
still recognised as ours, but as ``stale`` (its boot is not this one's: the
monotonic clock it was stamped with may have started again since a reboot), so
a phone mid-registration answers again without asking its user; a nonce "from
the future" is not ours.

Replays (RFC 7616 §3.3, §5.11): credentials must use ``qop=auth`` with a nonce
count (``nc``) and a ``cnonce``, and their ``uri`` must be the request's
Request-URI (compared as SIP URIs, RFC 3261 §19.1.4; RFC 7616 §3.4.6: else
400). For each nonce the highest ``nc`` accepted is remembered (only for
digests that were right, so only someone with a password can add to the table,
which is bounded: :data:`MAX_NONCES`); a request whose ``nc`` is not higher is a
replay and gets a fresh challenge (``stale=true``), so a captured request's
credentials cannot be used again, for another Contact, Call-ID or expiry, nor a
captured INVITE's. (What the digest does not cover, the headers, an attacker on
the path can still change as the request passes: only TLS prevents that.)

Challenges are offered for the configured algorithms (``[security]
digest_algorithms``: MD5 and SHA-256, RFC 8760), one ``WWW-Authenticate`` each
in the order given (RFC 8760 §2.4: most preferred first), each with
``qop="auth"``; credentials in RFC 2069 form (no ``qop``, so no ``nc``) only get
a new challenge.
The default is MD5 alone: phones still in wide use fail on any SHA-256
challenge even beside an MD5 one (baresip 1.0 with its libre refuses the whole
401, ``ENOSYS``), or answer only the first challenge and know only MD5 (SIPp
3.6). Unknown user names get the same challenge as
known ones and the same 403 when their digest is wrong, so answers reveal
nothing about which users exist (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from callhook.sip import digest
from callhook.sip.grammar import SipUri
from callhook.sip.message import Request, SipMessageError, parse_uri

#: How long a nonce is good for (seconds); a phone answering later gets ``stale=true``.
NONCE_SECONDS = 300.0
#: Nonces whose highest accepted ``nc`` is remembered at once (RFC 7616 §3.3); when more
#: are in use, the oldest are forgotten and become stale (a phone answers again).
MAX_NONCES = 10_000
#: The algorithms callhook can check (RFC 8760).
ALGORITHMS = ("MD5", "SHA-256")
#: The algorithms offered when the configuration does not say (see the module docstring).
DEFAULT_ALGORITHMS = ("MD5",)
#: Our realm (RFC 3261 §22.1: the phones show it; it keys their stored credentials).
REALM = "callhook"

Outcome = Literal["ok", "challenge", "stale", "wrong", "bad"]

# Our nonces: boot, time (ms, hex), salt, MAC, all lower-case hex (ASCII by construction:
# anything else, é or a fullwidth digit, is simply not ours).
_NONCE = re.compile(r"([0-9a-f]{8})\.([0-9a-f]{1,16})\.([0-9a-f]{12})\.([0-9a-f]{32})")
# RFC 7616 §3.4: nc is exactly 8 hex digits.
_NC = re.compile(r"[0-9a-fA-F]{8}")


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
        *,
        boot: str | None = None,
        max_nonces: int = MAX_NONCES,
    ) -> None:
        """``users``: name -> password; ``key``: the nonces' HMAC key (keep it secret);
        ``algorithms``: those offered, most preferred first (some of :data:`ALGORITHMS`);
        ``boot``: this start's id (8 hex digits; default random)."""
        self.users = users
        self.realm = realm
        self.algorithms = algorithms
        self._key = key
        self.boot = boot if boot is not None else secrets.token_hex(4)
        if not _NONCE.fullmatch(f"{self.boot}.0.{'0' * 12}.{'0' * 32}"):
            raise ValueError(f"boot id {self.boot!r} is not 8 hex digits")
        self.max_nonces = max_nonces
        #: nonce -> (when it was issued, the highest nc accepted with it).
        self._counts: dict[str, tuple[float, int]] = {}
        #: Nonces issued at or before this were forgotten (the table was full): stale.
        self._forgotten = float("-inf")

    def challenges(self, now: float, *, stale: bool = False) -> list[str]:
        """``WWW-Authenticate`` values for a 401, a fresh nonce in each."""
        return [
            digest.challenge(self.realm, self.nonce(now), a, stale=stale) for a in self.algorithms
        ]

    def nonce(self, now: float) -> str:
        """A new nonce stamped with this boot and ``now``."""
        stamp = f"{self.boot}.{max(0, int(now * 1000)):x}.{secrets.token_hex(6)}"
        return f"{stamp}.{self._mac(stamp)}"

    def _mac(self, stamp: str) -> str:
        return hmac.new(self._key, stamp.encode(), hashlib.sha256).hexdigest()[:32]

    def _issued(self, nonce: str, now: float) -> tuple[float, bool] | None:
        """When ``nonce`` was issued and whether in this boot; None when it is not ours."""
        found = _NONCE.fullmatch(nonce)
        if found is None:
            return None
        boot, stamp, salt, mac = found.groups()
        # Bytes, and ASCII by the pattern: compare_digest raises on non-ASCII str.
        if not hmac.compare_digest(mac.encode(), self._mac(f"{boot}.{stamp}.{salt}").encode()):
            return None
        issued = int(stamp, 16) / 1000
        if boot != self.boot:
            return issued, False  # ours, from before a restart: its clock means nothing now
        if issued > now + 1.0:
            return None  # from the future: not this clock's
        return issued, True

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
        qop, nc, cnonce = params.get("qop"), params.get("nc", ""), params.get("cnonce", "")
        if qop is None or qop.lower() != "auth":
            # RFC 7616 §3.4: qop is required; without it there is no nonce count.
            return Verdict("challenge", user, f"qop {(qop or '')[:20]!r} is not auth")
        if not _NC.fullmatch(nc) or not cnonce:
            return Verdict("challenge", user, "no nc or cnonce")
        issued = self._issued(params["nonce"], now)
        if issued is None:
            return Verdict("challenge", user, "a nonce that is not ours")
        if not same_uri(params["uri"], request.uri):
            # RFC 7616 §3.4.6 (RFC 2617 §3.2.2.5): the digest is for another resource.
            return Verdict("bad", user, "the digest uri is not the Request-URI")
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
            qop="auth",
            nc=nc,
            cnonce=cnonce,
        )
        answer = params["response"].lower().encode("utf-8", "surrogateescape")
        if password is None or not hmac.compare_digest(expected.encode(), answer):
            return Verdict("wrong", user, "wrong credentials")
        when, this_boot = issued
        if not this_boot:
            return Verdict("stale", user, "a nonce from before a restart")
        if now - when > NONCE_SECONDS or when <= self._forgotten:
            return Verdict("stale", user, "the nonce expired")
        count = int(nc, 16)
        last = self._counts.get(params["nonce"])
        if last is not None and count <= last[1]:
            # RFC 7616 §3.3: a nonce count seen before is a replay (or a phone's requests
            # out of order): a fresh nonce, which a real phone answers without fuss.
            return Verdict("stale", user, f"nonce count {nc} not above {last[1]:08x}")
        self._remember(params["nonce"], when, count, now)
        return Verdict("ok", user)

    def _remember(self, nonce: str, issued: float, count: int, now: float) -> None:
        """Note ``count`` as ``nonce``'s highest; the table stays within ``max_nonces``."""
        self._counts.pop(nonce, None)
        self._counts[nonce] = (issued, count)
        if len(self._counts) <= self.max_nonces:
            return
        self._counts = {n: c for n, c in self._counts.items() if now - c[0] <= NONCE_SECONDS + 1.0}
        while len(self._counts) > self.max_nonces:
            # The least recently used goes, and every nonce as old with it: they are
            # stale from now on (never valid again with a count already used).
            oldest = next(iter(self._counts))
            self._forgotten = max(self._forgotten, self._counts.pop(oldest)[0])


def same_uri(a: str, b: str) -> bool:
    """Whether two URIs are the same as RFC 3261 §19.1.4 compares SIP URIs (scheme and
    host without regard to case, userinfo exactly after unescaping, a port only equal to
    the same port, the parameters and headers as it says); other URIs must be equal."""
    try:
        x, y = parse_uri(a), parse_uri(b)
    except (SipMessageError, ValueError):
        return a == b
    if x.scheme not in ("sip", "sips") or y.scheme not in ("sip", "sips"):
        return a == b
    if (x.scheme, _host(x.host), x.port) != (y.scheme, _host(y.host), y.port):
        return False
    if _unescape(x.user) != _unescape(y.user) or _unescape(x.password) != _unescape(y.password):
        return False
    for name in set(x.params) | set(y.params):
        p, q = x.params.get(name), y.params.get(name)
        if name in x.params and name in y.params:
            if _lower(p) != _lower(q):
                return False
        elif name in ("user", "ttl", "method", "maddr"):
            return False  # §19.1.4: these never match when only one URI has them
    return _headers(x) == _headers(y)


def _host(host: str) -> str:
    return host.lower().strip("[]")


def _unescape(text: str | None) -> str | None:
    return None if text is None else unquote(text, errors="surrogateescape")


def _lower(text: str | None) -> str | None:
    return None if text is None else unquote(text, errors="surrogateescape").lower()


def _headers(uri: SipUri) -> dict[str, str]:
    return {k.lower(): unquote(v, errors="surrogateescape") for k, v in uri.headers.items()}
