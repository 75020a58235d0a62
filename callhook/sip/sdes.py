"""SDES keys in SDP offer/answer (RFC 4568 §7): which ``a=crypto`` line of an offer we
take, what an answer's line means. Sans-IO, on the values ``sdp.py`` parsed.

The ``srtp`` mode (:data:`SrtpMode`: ``off``, ``offer``, ``require``) is the policy
of a call; ``sdp.py``'s module docstring says what each one offers and accepts.
The answerer takes the first usable crypto line of the offer (the offerer's order
is its preference: §7.1.2); an answer carries exactly one line, which must have
the tag and suite of one we offered (§7.1.3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from callhook.media.srtp import Crypto, SrtpError

#: What SRTP an offer or answer may use (``sdp.py``'s module docstring).
SrtpMode = Literal["off", "offer", "require"]
SRTP_MODES: tuple[SrtpMode, ...] = ("off", "offer", "require")


def check_mode(srtp: str) -> None:
    """ValueError unless ``srtp`` is one of :data:`SRTP_MODES`."""
    if srtp not in SRTP_MODES:
        raise ValueError(f"srtp must be 'off', 'offer' or 'require', got {srtp!r}")


def add_crypto_line(crypto: list[Crypto], refused: list[str], value: str) -> None:
    """Keep a usable ``a=crypto`` value (§9.1) in ``crypto``, or why not in ``refused``."""
    try:
        line = Crypto.parse(value)
    except SrtpError as exc:
        refused.append(str(exc))
        return
    if any(c.tag == line.tag for c in crypto):  # §9.1: tags are unique in a stream
        refused.append(f"tag {line.tag}: repeated; the first one is used")
        return
    crypto.append(line)


def offered_crypto(
    savp: bool, crypto: Sequence[Crypto], refused: Sequence[str], where: str, srtp: SrtpMode
) -> Crypto | str | None:
    """The offered stream's crypto line we take, None for plain RTP, or why the stream
    cannot be taken under ``srtp`` (``where`` names it in that reason)."""
    if savp:
        if srtp == "off":
            return f"{where} is SRTP, which is off"
        if not crypto:
            return f"{where} has no usable a=crypto: {'; '.join(refused) or 'no a=crypto'}"
        return crypto[0]
    if srtp == "off":
        return None  # best-effort a=crypto lines in RTP/AVP are ignored: plain RTP
    if crypto:
        return crypto[0]
    if srtp == "require":
        why = "; ".join(refused)
        return f"{where} is plain RTP and SRTP is required" + (f" ({why})" if why else "")
    return None


def answered_crypto(
    savp: bool,
    proto: str,
    crypto: Sequence[Crypto],
    refused: Sequence[str],
    srtp: SrtpMode,
    offered: Sequence[Crypto],
) -> tuple[Crypto, Crypto] | str | None:
    """(our offered key, the answer's key) for the answer's a=crypto; None for plain RTP;
    or why the answer does not fit what we offered under ``srtp``."""
    if crypto:
        theirs = crypto[0]  # §7.1.2: an answer carries exactly one
        ours = next((c for c in offered if c.tag == theirs.tag), None)
        if ours is None:
            return f"the answer's a=crypto tag {theirs.tag} is not one we offered"
        if ours.suite != theirs.suite:
            return (
                f"the answer's a=crypto tag {theirs.tag} has suite {theirs.suite}, "
                f"we offered {ours.suite}"
            )
        return ours, theirs
    if refused:
        return "the answer's a=crypto is unusable: " + "; ".join(refused)
    if srtp == "require" or savp:
        return f"the answer ({proto}) has no a=crypto; SRTP was required"
    return None
