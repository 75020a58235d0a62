"""TLS contexts for SIP over TLS (RFC 3261 §26.2.1, RFC 5630), from Python's :mod:`ssl`.

One place builds them, so that ``callhook serve`` and the config check (which
loads the files once at start-up, turning a bad certificate into a config
error instead of a failed call) agree.
"""

from __future__ import annotations

import ssl
from pathlib import Path


def server_context(certificate: Path, key: Path | None) -> ssl.SSLContext:
    """The context of callhook's TLS listener; ssl.SSLError / OSError when unusable.

    Clients are not asked for a certificate: SIP peers authenticate with digest.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # A key with a passphrase cannot be used unattended: fail instead of prompting a TTY.
    context.load_cert_chain(certificate, key, password=_no_passphrase)
    return context


def _no_passphrase() -> str:
    raise ssl.SSLError("the TLS key is encrypted with a passphrase: give callhook a plain key")


def client_context(ca: Path | None) -> ssl.SSLContext:
    """The context of connections callhook opens: the peer's certificate is verified
    against the system CAs, or only ``ca`` when given, and must name the host."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
