"""Passwords written into URLs (``https://user:password@host/...``) stay out of every log.

An application may give its pages with credentials in them (HTTP basic
authentication); callhook uses them to fetch, and must not write them where
its URLs are written: the server log, the call logs, the console. Pure.
"""

from __future__ import annotations

import logging
import re

#: A URL's ``user:password@``: the password is what goes, up to the *last* ``@`` before
#: the path (a password may hold an ``@`` of its own).
_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/@\s:]*):[^/\s]*@")
#: A SIP URI's ``user:password@`` (RFC 3261 §19.1.1 allows it, and deprecates it).
_SIP_USERINFO = re.compile(r"\b(sips?:[^:@\s;/<>\"]+):[^@\s;<>\"]*@", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` and
    ``sip:user:password@`` replaced by ``***``."""
    if "@" not in text:  # the common case costs one scan
        return text
    return _SIP_USERINFO.sub(r"\1:***@", _USERINFO.sub(r"\1:***@", text))


class Redacting(logging.Filter):
    """A logging filter that redacts the formatted message and its traceback (for the
    server log's handlers: an exception's text may carry the URL it failed on)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
