"""Recording files: valid while written, durable when closed, recoverable after a crash."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from callhook.media import g711, tones, wav
from callhook.media.session import SinkFull
from callhook.store import crypto, wavfile
from callhook.store.wavfile import WavWriter, Written

KEY = crypto.Key.from_hex("5a" * 32, "a5" * 16)


def audio(seconds: float, law: str = "ulaw") -> bytes:
    return g711.encode(law, tones.tone(440.0, seconds))  # type: ignore[arg-type]


def frames(data: bytes, size: int = 160) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


class Durable:
    """Collects on_durable calls (made on the finisher thread)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.written: Written | None = None

    def __call__(self, written: Written) -> None:
        self.written = written
        self.done.set()

    def wait(self) -> Written:
        assert self.done.wait(10), "on_durable was not called"
        assert self.written is not None
        return self.written


@pytest.mark.parametrize("law", ["alaw", "ulaw"])
def test_a_plain_file_is_a_valid_wav_while_written_and_exact_when_closed(
    tmp_path: Path, law: str
) -> None:
    path = tmp_path / "rec" / "a.wav"
    durable = Durable()
    writer = WavWriter(path, law, on_durable=durable)
    sound = audio(2.51, law)
    for i, frame in enumerate(frames(sound)):
        writer.write(frame)
        if i % 37 == 0:  # the file on disk is always a WAV file holding a prefix of the audio
            data = path.read_bytes()
            info = wav.read_info(data)
            held = data[info.data_offset : info.data_offset + info.data_length]
            assert sound.startswith(held)
            sent = len(sound[: (i + 1) * 160])
            # On disk: all but the last flush; in the header: all but the last second.
            assert sent - (len(data) - info.data_offset) <= wavfile.FLUSH_BYTES
            assert sent - len(held) <= wavfile.FLUSH_BYTES + wavfile.HEADER_REFRESH_BYTES
    writer.close()
    written = durable.wait()
    assert written.length == len(sound)
    assert written.seconds == pytest.approx(2.51)
    assert path.read_bytes() == wav.g711_file(law, sound)  # header, audio, pad byte: exact


def test_an_encrypted_file_is_a_complete_ciphertext_while_written(tmp_path: Path) -> None:
    path = tmp_path / "enc.wav"
    durable = Durable()
    writer = WavWriter(path, "alaw", key=KEY, on_durable=durable)
    sound = audio(1.33, "alaw")
    for i, frame in enumerate(frames(sound)):
        writer.write(frame)
        if i % 11 == 0:
            plain = crypto.decrypt_wav(path.read_bytes(), KEY)  # fixes the unknown length
            info = wav.read_info(plain)
            assert sound.startswith(plain[info.data_offset :])
    writer.close()
    assert durable.wait().length == len(sound)
    data = path.read_bytes()
    # The final file is the whole WAV encrypted: exact sizes, nothing left to fix.
    assert crypto.decrypt(data, KEY) == wav.g711_file("alaw", sound)
    assert not list(tmp_path.glob(".*.tmp"))


def test_the_size_limit_stops_the_recording(tmp_path: Path) -> None:
    writer = WavWriter(tmp_path / "a.wav", "ulaw", max_bytes=1000)
    for frame in frames(audio(0.2))[:6]:
        writer.write(frame)
    with pytest.raises(SinkFull):
        writer.write(b"\xff" * 160)
    writer.close()
    assert wav.read_info((tmp_path / "a.wav").read_bytes()).data_length == 960


def _crash(writer: WavWriter) -> None:
    """What kill -9 leaves: the fd closed by the kernel, nothing more written."""
    fd = writer._fd
    assert fd is not None
    os.close(fd)
    writer._fd = None


def test_recover_a_plain_file_cut_by_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "a.wav"
    writer = WavWriter(path, "ulaw")
    sound = audio(1.7)
    for frame in frames(sound):
        writer.write(frame)
    _crash(writer)
    stale = wav.read_info(path.read_bytes())
    assert stale.data_length < len(sound) - wavfile.FLUSH_BYTES  # the header lags behind
    length = wavfile.recover(path, encrypted=False)
    data = path.read_bytes()
    info = wav.read_info(data)
    assert length == info.data_length
    assert len(sound) - wavfile.FLUSH_BYTES < length <= len(sound)
    assert data[info.data_offset :] == sound[:length]
    assert int.from_bytes(data[4:8], "little") == len(data) - 8


def test_recover_an_encrypted_file_cut_by_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "a.wav"
    writer = WavWriter(path, "alaw", key=KEY)
    sound = audio(0.9, "alaw")
    for frame in frames(sound):
        writer.write(frame)
    _crash(writer)
    length = wavfile.recover(path, encrypted=True)
    plain = crypto.decrypt_wav(path.read_bytes(), KEY)
    info = wav.read_info(plain)
    assert sound.startswith(plain[info.data_offset :])
    assert abs(length - info.data_length) <= crypto.BLOCK  # estimated without the key
    assert info.data_length > len(sound) - wavfile.FLUSH_BYTES


def test_recover_refuses_a_file_that_is_not_a_wav(tmp_path: Path) -> None:
    path = tmp_path / "a.wav"
    path.write_bytes(b"garbage" * 10)
    with pytest.raises(wav.WavError):
        wavfile.recover(path, encrypted=False)


def test_audio_past_the_duration_limit_is_dropped_not_an_error(tmp_path: Path) -> None:
    """seconds_max_duration is exact even when the action's timer fires late."""
    writer = WavWriter(tmp_path / "a.wav", "ulaw", max_bytes=10**6, limit_bytes=1000)
    sound = audio(0.2)
    for frame in frames(sound):
        writer.write(frame)  # no SinkFull: this is the action's own limit
    writer.close()
    data = (tmp_path / "a.wav").read_bytes()
    info = wav.read_info(data)
    assert info.data_length == 1000
    assert data[info.data_offset : info.data_offset + 1000] == sound[:1000]
