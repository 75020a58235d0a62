"""Passwords written into URLs (``https://user:password@host/...``) stay out of every log.

An application may give its pages with credentials in them (HTTP basic
authentication); callhook uses them to fetch, and must not write them where
its URLs are written: the server log, the call logs, the console. Pure.
"""

from __future__ import annotations

import logging
import re

#: A URL's ``user:password@``: the password is what goes.
_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/@\s:]*):[^/@\s]*@")


def redact(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` replaced by ``***``."""
    if "@" not in text:  # the common case costs one scan
        return text
    return _USERINFO.sub(r"\1:***@", text)


class Redacting(logging.Filter):
    """A logging filter that redacts the formatted message (for the server log's handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True
