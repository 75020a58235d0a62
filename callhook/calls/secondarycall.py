"""A connect's far leg as its own pages see it: Aculab's ``secondary_call``. Pure.

The runner of a far leg's ``secondary_call`` pages (:class:`callhook.calls.runner.CallRunner`)
differs from a caller's in three ways, kept here: the call it is put through to (its
pages' ``this_call.primary_call_id``, callhook's), what joins it to that call when its
first page's actions have all run, and its whole-call recording's cipher. Aculab:
"supply the cipher in the response to the request on the secondary call's first page"
when the connect asks for an encrypted recording and gives no cipher itself; without
one the far leg is never joined (nothing is recorded in clear), whatever way its pages
ended. Its final page also carries Aculab's ``dropped_calls``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from callhook.actions.schema import Cipher
from callhook.ports import PageError

#: A cipher as the media side takes it: (type, key, initialisation vector).
CipherTuple = tuple[str, str, str]


class SecondaryCall:
    """One far leg's side of its pages (see the module docstring)."""

    def __init__(
        self,
        primary_call_id: str | None,
        on_ready: Callable[[CipherTuple | None], object],
        dropped_calls: Callable[[], list[dict[str, Any]]] | None = None,
        needs_cipher: bool = False,
    ) -> None:
        self.primary_call_id = primary_call_id
        self.on_ready = on_ready
        self.dropped_calls = dropped_calls
        self.needs_cipher = needs_cipher
        self.cipher: CipherTuple | None = None  # (never logged)

    def answered(self, url: str, cipher: Cipher | None, *, first: bool) -> None:
        """A page of this leg answered with ``cipher`` (its ``call_recording_cipher``);
        PageError when it is the first page and a cipher was owed and not given."""
        if cipher is not None:
            self.cipher = cipher.as_tuple()
        if first and self.needs_cipher and self.cipher is None:
            raise PageError(
                "invalid",
                url,
                "secondary_call.call_recording_encryption is on and the connect gave no "
                "call_recording_cipher: this first page's response must give one",
            )

    def join(self, first_page: str) -> None:
        """Join the leg to its call; PageError instead when a cipher is owed and missing."""
        if self.needs_cipher and self.cipher is None:
            raise PageError(
                "invalid",
                first_page,
                "secondary_call.call_recording_encryption is on and neither the connect nor "
                "the first page's response gave a call_recording_cipher",
            )
        self.on_ready(self.cipher)
