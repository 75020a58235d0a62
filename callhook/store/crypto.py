"""AES-CBC for recordings and prompts (docs/recordings.md: the ``aescbc`` cipher).

The whole WAV file is encrypted with AES in CBC mode and PKCS#7 padding, so
``openssl enc -d -aes-256-cbc -K <key> -iv <iv>`` (``-aes-128-cbc`` or
``-aes-192-cbc`` for shorter keys) turns it back into the WAV file.

A recording is encrypted while it is written: the plaintext never touches
the disk. :class:`CbcStream` exploits the chaining of CBC: a finished
ciphertext block never changes, so the file can always be kept a complete,
correctly padded ciphertext of everything written so far — the full blocks
followed by one *tail* block (the held-back bytes plus their padding). The
next write replaces the tail. A crash therefore leaves a file that decrypts.

Keys are never stored or logged: :class:`Key` hides them from ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from callhook.media import wav

BLOCK = 16


class DecryptionError(ValueError):
    """Data that does not decrypt with the given key and IV, and why."""


@dataclass(frozen=True)
class Key:
    """An ``aescbc`` key and initialisation vector (16/24/32-byte key, 16-byte IV)."""

    key: bytes = field(repr=False)
    iv: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.key) not in (16, 24, 32):
            raise ValueError("an aescbc key is 16, 24 or 32 bytes (32, 48 or 64 hex characters)")
        if len(self.iv) != BLOCK:
            raise ValueError("an aescbc initialisation vector is 16 bytes (32 hex characters)")

    @classmethod
    def from_hex(cls, key: str, iv: str) -> Key:
        """A key from the hex strings of a cipher object; raises ValueError."""
        try:
            return cls(bytes.fromhex(key), bytes.fromhex(iv))
        except ValueError as exc:
            raise ValueError(f"not a valid aescbc key and IV: {exc}") from None

    @classmethod
    def from_cipher(cls, cipher: tuple[str, str, str]) -> Key:
        """A key from an action's ``(type, key hex, iv hex)`` cipher."""
        kind, key, iv = cipher
        if kind != "aescbc":
            raise ValueError(f"unsupported cipher type {kind!r} (only aescbc)")
        return cls.from_hex(key, iv)

    def _cipher(self, iv: bytes | None = None) -> Cipher[modes.CBC]:
        return Cipher(algorithms.AES(self.key), modes.CBC(iv or self.iv))


def _pad(data: bytes) -> bytes:
    """PKCS#7 (RFC 5652 §6.3): 1 to 16 bytes, each holding the pad length."""
    n = BLOCK - len(data) % BLOCK
    return data + bytes([n]) * n


def encrypt(data: bytes, key: Key) -> bytes:
    """``data`` encrypted as ``openssl enc -aes-*-cbc`` does."""
    encryptor = key._cipher().encryptor()
    return encryptor.update(_pad(data)) + encryptor.finalize()


def decrypt(data: bytes, key: Key) -> bytes:
    """The plaintext of ``data``; raises :class:`DecryptionError` (most often: a wrong key)."""
    if not data or len(data) % BLOCK:
        raise DecryptionError(
            f"not AES-CBC data: {len(data)} bytes is not a whole number of 16-byte blocks"
        )
    decryptor = key._cipher().decryptor()
    plain = decryptor.update(data) + decryptor.finalize()
    n = plain[-1]
    if not 1 <= n <= BLOCK or plain[-n:] != bytes([n]) * n:
        raise DecryptionError("the padding is wrong after decryption: wrong key or IV?")
    return plain[:-n]


def decrypt_wav(data: bytes, key: Key) -> bytes:
    """A decrypted WAV file, its sizes set from its real length.

    A recording cut short by a crash declares an unknown length (see
    :mod:`callhook.store.wavfile`); the sizes are fixed here. Raises
    :class:`DecryptionError` when the result is not a WAV file.
    """
    try:
        plain = decrypt(data, key)
    except DecryptionError:
        plain = _salvage(data, key)
    if plain[:4] != b"RIFF" or plain[8:12] != b"WAVE":
        raise DecryptionError("the decrypted data is not a WAV file: wrong key or IV?")
    try:
        return wav.fix_sizes(plain)
    except wav.WavError as exc:
        raise DecryptionError(f"the decrypted WAV file is damaged: {exc}") from None


def _salvage(data: bytes, key: Key) -> bytes:
    """A recording cut mid-write by a crash: all its blocks but the (torn) last one.

    Only for a WAV that declares an unknown length (still being written when
    the process died); anything else re-raises the padding error.
    """
    usable = (len(data) - 1) // BLOCK * BLOCK if len(data) > BLOCK else 0
    plain = key._cipher().decryptor().update(data[:usable])
    try:
        info = wav.read_info(plain)
        declared = int.from_bytes(plain[info.data_offset - 4 : info.data_offset], "little")
    except wav.WavError:
        declared = 0
    if declared != wav.UNKNOWN_SIZE:
        raise DecryptionError("the padding is wrong after decryption: wrong key or IV?")
    return plain


class CbcStream:
    """Encrypts a stream so that what was written so far is always a valid ciphertext.

    :meth:`encrypt` returns the ciphertext blocks that ``data`` makes final and
    the one *tail* block that ends the ciphertext after them (the held-back
    bytes with their padding), without changing the stream: the writer puts
    both where the previous tail was and calls :meth:`commit` only once they
    are on disk. A failed write therefore leaves the stream where the file is,
    and what is on disk still decrypts.
    """

    def __init__(self, key: Key) -> None:
        self.key = key
        self._held = b""
        self._last = key.iv  # the previous ciphertext block: the next block's chaining value
        self.length = 0  # plaintext bytes committed

    def encrypt(self, data: bytes) -> tuple[bytes, bytes]:
        """(final blocks, tail) for the stream followed by ``data``; the stream is unchanged."""
        pending = self._held + data
        whole = len(pending) - len(pending) % BLOCK
        blocks = self.key._cipher(self._last).encryptor().update(pending[:whole])
        last = blocks[-BLOCK:] if whole else self._last
        encryptor = self.key._cipher(last).encryptor()
        return blocks, encryptor.update(_pad(pending[whole:])) + encryptor.finalize()

    def commit(self, data: bytes, blocks: bytes) -> None:
        """``data`` (whose :meth:`encrypt` gave ``blocks``) is on disk: move the stream on."""
        pending = self._held + data
        self._held = pending[len(blocks) :]
        if blocks:
            self._last = blocks[-BLOCK:]
        self.length += len(data)


def reencrypt_with_header(
    source: BinaryIO, target: BinaryIO, key: Key, header: bytes, chunk: int = 1 << 20
) -> int:
    """Copy ciphertext ``source`` to ``target``, its plaintext's first bytes replaced by ``header``.

    Streams in ``chunk``-sized pieces (memory stays small for any file size);
    returns the bytes written. Raises :class:`DecryptionError` when ``source``
    does not decrypt.
    """
    decryptor = key._cipher().decryptor()
    encryptor = key._cipher().encryptor()
    written = 0
    head = b""  # plaintext not yet past the header
    held = b""  # the last decrypted block: it holds the padding when it is the end
    while data := source.read(chunk):
        plain = held + decryptor.update(data)
        held, plain = plain[-BLOCK:], plain[:-BLOCK]
        if len(head) < len(header):
            head += plain
            if len(head) < len(header):
                continue
            plain = header + head[len(header) :]
            head = header
        written += target.write(encryptor.update(plain))
    plain = held + decryptor.finalize()
    n = plain[-1] if plain else 0
    if not plain or not 1 <= n <= BLOCK or plain[-n:] != bytes([n]) * n:
        raise DecryptionError("the padding is wrong after decryption: wrong key or IV?")
    plain = plain[:-n]
    if len(head) < len(header):  # a file shorter than one chunk past its header
        head += plain
        if len(head) < len(header):
            raise DecryptionError("the decrypted file is shorter than a WAV header")
        plain = header + head[len(header) :]
    written += target.write(encryptor.update(_pad(plain)) + encryptor.finalize())
    return written
