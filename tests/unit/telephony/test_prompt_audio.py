"""Prompt audio from the store: encrypted files (decryption_cipher)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from callhook.events import PlayFile, PlayTone
from callhook.media import g711, tones, wav
from callhook.media.player import PromptError
from callhook.store import crypto
from callhook.store.files import MediaStore
from callhook.telephony.prompts import PromptAudio

KEY, IV = "a1" * 16, "1a" * 16  # AES-128


@pytest.fixture
def prompts(tmp_path: Path) -> PromptAudio:
    store = MediaStore(tmp_path)
    audio = wav.g711_file("alaw", g711.encode("alaw", tones.tone(600.0, 0.4)))
    store.path("app", "plain.wav").parent.mkdir(parents=True)
    store.path("app", "plain.wav").write_bytes(audio)
    store.path("app", "secret.wav").write_bytes(crypto.encrypt(audio, crypto.Key.from_hex(KEY, IV)))
    return PromptAudio(store, None)


def test_an_encrypted_file_waits_for_the_worker_thread(prompts: PromptAudio) -> None:
    items = (PlayTone(1000.0, 0.1), PlayFile("secret.wav", ("aescbc", KEY, IV)))
    segments, done, error = prompts.ready("app", items, "alaw")
    assert (done, error) == (1, None)  # the tone now; the file is decrypted off the loop
    (tone,) = segments
    assert isinstance(tone, bytes) and len(tone) == 800


def test_the_right_key_plays_what_the_plain_file_holds(prompts: PromptAudio) -> None:
    plain = prompts.encoded_item("app", PlayFile("plain.wav"), "ulaw")
    secret = prompts.encoded_item("app", PlayFile("secret.wav", ("aescbc", KEY, IV)), "ulaw")
    assert secret == plain and len(plain) == 3200


def test_a_wrong_key_is_a_clear_error_not_noise(prompts: PromptAudio) -> None:
    with pytest.raises(PromptError, match="cannot be decrypted with its decryption_cipher"):
        prompts.encoded_item("app", PlayFile("secret.wav", ("aescbc", "b2" * 16, IV)), "ulaw")
    with pytest.raises(PromptError, match="no such file"):
        prompts.encoded_item("app", PlayFile("gone.wav", ("aescbc", KEY, IV)), "ulaw")


def test_a_file_not_cached_yet_is_decoded_on_the_worker_thread(
    prompts: PromptAudio, tmp_path: Path
) -> None:
    items = (PlayTone(1000.0, 0.1), PlayFile("plain.wav"))
    segments, done, _ = prompts.ready("app", items, "alaw")
    assert done == 1  # the file is read and decoded off the event loop (ADPCM is slow)
    audio = prompts.encoded_item("app", PlayFile("plain.wav"), "alaw")  # what the thread does
    segments, done, _ = prompts.ready("app", items, "alaw")
    assert done == 2 and segments[1] == audio  # cached now: it plays at once
    path = tmp_path / "app" / "plain.wav"
    os.utime(path, ns=(1, 1))  # changed on disk: decoded again, off the loop
    assert prompts.ready("app", items, "alaw")[1] == 1
