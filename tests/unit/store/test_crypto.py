"""AES-CBC of recordings (docs/recordings.md, "Encryption"), checked against the real
``openssl`` binary."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callhook.media import g711, tones, wav
from callhook.store import crypto

OPENSSL = shutil.which("openssl")
KEY_HEX = "00112233445566778899aabbccddeeff" * 2
IV_HEX = "0f0e0d0c0b0a09080706050403020100"
KEY = crypto.Key.from_hex(KEY_HEX, IV_HEX)
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed")


def openssl(args: list[str], data: bytes) -> bytes:
    assert OPENSSL is not None
    done = subprocess.run([OPENSSL, *args], input=data, capture_output=True, check=True)
    return done.stdout


@needs_openssl
@pytest.mark.parametrize("bits", [128, 192, 256])
def test_openssl_decrypts_what_we_encrypt_and_back(bits: int) -> None:
    key_hex = KEY_HEX[: bits // 4]
    key = crypto.Key.from_hex(key_hex, IV_HEX)
    data = wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(440.0, 0.37)))
    ours = crypto.encrypt(data, key)
    cipher = f"-aes-{bits}-cbc"
    assert openssl(["enc", "-d", cipher, "-K", key_hex, "-iv", IV_HEX], ours) == data
    theirs = openssl(["enc", "-e", cipher, "-K", key_hex, "-iv", IV_HEX], data)
    assert theirs == ours
    assert crypto.decrypt(theirs, key) == data


def test_a_wrong_key_is_a_clear_error() -> None:
    data = crypto.encrypt(wav.g711_file("alaw", b"\xd5" * 800), KEY)
    other = crypto.Key.from_hex("ff" * 32, IV_HEX)
    with pytest.raises(crypto.DecryptionError, match="wrong key"):
        crypto.decrypt_wav(data, other)
    with pytest.raises(crypto.DecryptionError, match="not a whole number of 16-byte blocks"):
        crypto.decrypt(data[:-3], KEY)
    # Encrypted, but not a WAV file: also named as a probable wrong key.
    with pytest.raises(crypto.DecryptionError, match="not a WAV file"):
        crypto.decrypt_wav(crypto.encrypt(b"hello world" * 10, KEY), KEY)


def test_keys_are_checked_and_never_shown() -> None:
    assert KEY_HEX not in repr(KEY) and "0011" not in repr(KEY)
    with pytest.raises(ValueError):
        crypto.Key.from_hex("abcd", IV_HEX)
    with pytest.raises(ValueError):
        crypto.Key.from_cipher(("aesgcm", KEY_HEX, IV_HEX))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=70), st.booleans()), max_size=12))
def test_the_stream_is_a_complete_ciphertext_after_every_write(
    pieces: list[tuple[bytes, bool]],
) -> None:
    """Final blocks + the current tail always decrypt to exactly what was committed so far;
    a write that is not committed (it failed) leaves the stream where the file is."""
    stream = crypto.CbcStream(KEY)
    blocks = b""
    written = b""
    tail = crypto.encrypt(b"", KEY)
    for piece, lands in pieces:
        new_blocks, new_tail = stream.encrypt(piece)
        if lands:
            stream.commit(piece, new_blocks)
            blocks += new_blocks
            tail = new_tail
            written += piece
        assert crypto.decrypt(blocks + tail, KEY) == written
    assert stream.length == len(written)
    assert blocks + tail == crypto.encrypt(written, KEY)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 300), st.sampled_from([16, 64, 1000]))
def test_reencrypt_with_header_streams_any_length(audio: int, chunk: int) -> None:
    import io

    from callhook.store.wavfile import unknown_length_header

    sound = bytes(range(256)) * 2
    sound = sound[:audio]
    source = io.BytesIO(crypto.encrypt(unknown_length_header("ulaw") + sound, KEY))
    target = io.BytesIO()
    header = wav.g711_header("ulaw", len(sound))
    size = crypto.reencrypt_with_header(source, target, KEY, header, chunk=chunk)
    assert size == len(target.getvalue())
    assert crypto.decrypt(target.getvalue(), KEY) == header + sound


def test_reencrypt_with_a_wrong_key_is_an_error() -> None:
    import io

    data = crypto.encrypt(wav.g711_file("ulaw", b"\x7f" * 999), KEY)
    other = crypto.Key.from_hex("01" * 16, "02" * 16)
    with pytest.raises(crypto.DecryptionError, match="wrong key"):
        crypto.reencrypt_with_header(io.BytesIO(data), io.BytesIO(), other, b"x" * 58)


def test_decrypt_wav_fixes_an_unknown_length() -> None:
    from callhook.store.wavfile import unknown_length_header

    audio = g711.encode("alaw", tones.tone(1000.0, 0.5))
    data = crypto.encrypt(unknown_length_header("alaw") + audio, KEY)
    plain = crypto.decrypt_wav(data, KEY)
    info = wav.read_info(plain)
    assert info.format_tag == wav.FORMAT_ALAW
    assert info.data_length == len(audio)
    assert plain[info.data_offset :] == audio
    assert int.from_bytes(plain[4:8], "little") == len(plain) - 8


@needs_openssl
def test_decrypt_command(tmp_path: Path) -> None:
    """``callhook decrypt`` writes the WAV file openssl would, sizes fixed."""
    import sys

    audio = g711.encode("ulaw", tones.tone(700.0, 0.3))
    source = tmp_path / "rec.wav"
    source.write_bytes(crypto.encrypt(wav.g711_file("ulaw", audio), KEY))
    out = tmp_path / "plain.wav"
    done = subprocess.run(
        [sys.executable, "-m", "callhook", "decrypt", str(source), "-o", str(out)],
        env={"CALLHOOK_KEY": KEY_HEX, "CALLHOOK_IV": IV_HEX, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == wav.g711_file("ulaw", audio)
    assert out.stat().st_mode & 0o077 == 0  # the plaintext is its owner's only
    (tmp_path / "elsewhere").mkdir()
    default = subprocess.run(
        [sys.executable, "-m", "callhook", "decrypt", str(source)],
        env={"CALLHOOK_KEY": KEY_HEX, "CALLHOOK_IV": IV_HEX, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        cwd=tmp_path / "elsewhere",
    )
    assert default.returncode == 0, default.stderr
    # Into the current directory, not beside the recording (the application's namespace).
    assert (tmp_path / "elsewhere" / "rec.decrypted.wav").exists()
    assert not (tmp_path / "rec.decrypted.wav").exists()
    wrong = subprocess.run(
        [sys.executable, "-m", "callhook", "decrypt", str(source), "-o", str(tmp_path / "x.wav")],
        env={"CALLHOOK_KEY": "ab" * 32, "CALLHOOK_IV": IV_HEX, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert wrong.returncode == 1
    assert "wrong key" in wrong.stderr
    assert not (tmp_path / "x.wav").exists()


def test_a_recording_torn_by_a_crash_still_decrypts_up_to_the_tear() -> None:
    """A kill mid-write (or a power cut) can leave a last block that is not a valid tail."""
    from callhook.store.wavfile import unknown_length_header

    audio = g711.encode("ulaw", tones.tone(800.0, 0.25))
    whole = crypto.encrypt(unknown_length_header("ulaw") + audio, KEY)
    torn = whole[:-16] + bytes(16)  # the tail block never made it
    plain = crypto.decrypt_wav(torn, KEY)
    info = wav.read_info(plain)
    assert audio.startswith(plain[info.data_offset :])
    assert len(audio) - info.data_length <= 32
    # A complete file (its sizes known) is not "salvaged": a bad ending is an error.
    finished = crypto.encrypt(wav.g711_file("ulaw", audio), KEY)
    with pytest.raises(crypto.DecryptionError, match="wrong key"):
        crypto.decrypt_wav(finished[:-16] + bytes(16), KEY)
