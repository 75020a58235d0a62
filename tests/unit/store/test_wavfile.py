"""Recording files: valid while written, durable when closed, recoverable after a crash."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from callhook.media import g711, tones, wav
from callhook.media.sink import SinkFull
from callhook.store import crypto, wavfile
from callhook.store.files import MediaStore
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


class FailOnce:
    """``write_all`` that fails (disk full) on its ``nth`` call, then works again."""

    def __init__(self, nth: int) -> None:
        self.calls = 0
        self.nth = nth
        self.real = wavfile.write_all

    def __call__(self, fd: int, data: bytes, offset: int) -> None:
        self.calls += 1
        if self.calls == self.nth:
            raise OSError(28, "No space left on device")
        self.real(fd, data, offset)


@pytest.mark.parametrize("encrypted", [False, True])
def test_a_failed_write_keeps_everything_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encrypted: bool
) -> None:
    """Disk full mid-recording: the file still reads (decrypts) and holds what was written."""
    path = tmp_path / "a.wav"
    durable = Durable()
    writer = WavWriter(path, "ulaw", key=KEY if encrypted else None, on_durable=durable)
    sound = audio(1.0)
    monkeypatch.setattr(wavfile, "write_all", FailOnce(nth=3))  # the third flush fails
    sent = 0
    with pytest.raises(OSError):
        for frame in frames(sound):
            sent += len(frame)
            writer.write(frame)
    writer.close()  # what the session does after a write error
    written = durable.wait()
    data = path.read_bytes()
    plain = crypto.decrypt_wav(data, KEY) if encrypted else data
    info = wav.read_info(plain)
    held = plain[info.data_offset : info.data_offset + info.data_length]
    assert len(held) == written.length == 2 * wavfile.FLUSH_BYTES  # the lost flush is not counted
    assert held == sound[: len(held)]


def test_short_writes_are_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwrite

    def dribble(fd: int, data: bytes | memoryview, offset: int) -> int:
        return real(fd, bytes(data[:7]), offset)  # the kernel may write less than asked

    monkeypatch.setattr(os, "pwrite", dribble)
    writer = WavWriter(tmp_path / "a.wav", "alaw", key=KEY)
    sound = audio(0.5, "alaw")
    for frame in frames(sound):
        writer.write(frame)
    monkeypatch.undo()
    durable = Durable()
    writer.on_durable = durable
    writer.close()
    durable.wait()
    assert crypto.decrypt((tmp_path / "a.wav").read_bytes(), KEY) == wav.g711_file("alaw", sound)


def test_an_encrypted_recording_that_cannot_be_reencrypted_is_still_announced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(*args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(crypto, "reencrypt_with_header", no_space)
    durable = Durable()
    writer = WavWriter(tmp_path / "a.wav", "ulaw", key=KEY, on_durable=durable)
    sound = audio(0.75)
    for frame in frames(sound):
        writer.write(frame)
    writer.close()
    written = durable.wait()  # announced with what the file holds (estimated without the key)
    assert abs(written.length - len(sound)) <= crypto.BLOCK
    plain = crypto.decrypt_wav((tmp_path / "a.wav").read_bytes(), KEY)
    assert plain[wav.read_info(plain).data_offset :] == sound
    assert not list(tmp_path.glob(".*.tmp"))


def test_recover_leaves_a_complete_odd_length_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "a.wav"
    complete = wav.g711_file("ulaw", audio(0.2)[:801])  # 801 bytes of audio + the pad byte
    path.write_bytes(complete)
    assert wavfile.recover(path, encrypted=False) == 801
    assert path.read_bytes() == complete


def test_new_directories_are_created_and_synced_by_the_finisher_not_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller is the event loop: it never waits for fsync (a directory's may take
    seconds while other files are written); the finisher syncs each new entry."""
    synced: list[tuple[str, str]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append((threading.current_thread().name, os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    writer = WavWriter(tmp_path / "app" / "recordings" / "a.wav", "ulaw")
    assert synced == []
    writer.close()
    assert wavfile.drain()
    assert wav.read_info((tmp_path / "app" / "recordings" / "a.wav").read_bytes()).data_length == 0
    me = threading.current_thread().name
    assert all(thread != me for thread, _ in synced)
    assert {path for _, path in synced} >= {str(tmp_path), str(tmp_path / "app")}


def test_deleting_a_recording_waits_for_its_finisher_then_withdraws_it(tmp_path: Path) -> None:
    """MediaStore.delete with the composition root's hooks: never under a finisher's feet."""
    store = MediaStore(tmp_path)
    path = store.path("app", "recordings/r.wav")
    gate, order = threading.Event(), []

    def durable(written: wavfile.Written) -> None:
        gate.wait(5)  # the finisher is still at work (fsync, re-encryption...)
        order.append("durable")

    def before(p: Path) -> None:
        wavfile.finished(p)
        order.append("finished")

    store.before_delete = before
    store.after_delete = lambda app, name: order.append(f"deleted {app}/{name}")
    writer = WavWriter(path, "alaw", key=KEY, on_durable=durable)
    writer.write(audio(0.5, "alaw"))
    writer.close()
    assert wavfile.finished(path, timeout=0.05) is False  # still being finished
    deleting = threading.Thread(target=store.delete, args=("app", "recordings/r.wav"))
    deleting.start()
    gate.set()
    deleting.join(5)
    assert order == ["durable", "finished", "deleted app/recordings/r.wav"]
    assert not path.exists()
    assert not path.with_name(f".{path.name}.tmp").exists()  # nothing renamed back
    assert wavfile.finished(path, timeout=0.05) is True  # nothing left to wait for


@pytest.mark.parametrize("key", [None, KEY])
def test_a_stereo_file_declares_two_channels_and_counts_sample_frames(
    tmp_path: Path, key: crypto.Key | None
) -> None:
    path = tmp_path / "call.wav"
    durable = Durable()
    writer = WavWriter(path, "alaw", key=key, on_durable=durable, channels=2)
    left, right = audio(1.0, "alaw"), g711.silence("alaw", 8000)
    both = bytearray(16000)
    both[0::2], both[1::2] = left, right
    for frame in frames(bytes(both), 320):
        writer.write(frame)
    assert writer.seconds == 1.0
    writer.close()
    assert durable.wait().length == 16000
    data = path.read_bytes() if key is None else crypto.decrypt_wav(path.read_bytes(), key)
    info = wav.read_info(data)
    assert (info.channels, info.block_align, info.data_length) == (2, 2, 16000)
    assert data[info.data_offset : info.data_offset + 16000] == both
    fact = data.index(b"fact")
    assert int.from_bytes(data[fact + 8 : fact + 12], "little") == 8000  # sample frames
    decoded = wav.decode_to_8k(data)  # a stereo recording plays (its channels mixed)
    assert len(decoded) == 8000
