"""espeak-ng: a light formant synthesiser with ~100 languages (robotic, but instant).

Method. ``libespeak-ng`` and its data come from the ``espeakng-loader`` wheel and are
driven through ctypes: initialised once, lazily, in synchronous mode
(``AUDIO_OUTPUT_SYNCHRONOUS``), with a synth callback that collects the 22.05 kHz int16
samples into a list; :func:`callhook.speech.tts.telephone_audio` then resamples them to
8 kHz (soxr HQ) and sets the same telephone level as piper's voices. The C library keeps
its state in globals and is not thread-safe, so every call into it holds one lock; that
costs nothing in practice (a sentence takes ~1 ms).

Voices are espeak's own, named by the last part of their identifier in lower case
(``gmw/en-US`` → ``en-us``, ``gmw/en`` → ``en``, the British voice, ``roa/fr`` → ``fr``).
:meth:`EspeakEngine.voice_for` maps a BCP 47 tag through the languages each voice
declares, best priority first: the whole tag (en-GB → en, fr-FR → fr, es-MX → es-419),
then its primary subtag (de-AT → de, zh-CN → cmn); None when neither matches.

Measured (``python -m bench.tts``, one pinned core, 10 IVR prompts): 0.0011 CPU seconds
per second of audio, resampling included (1–15 ms a sentence); loading and initialising
15–70 ms; RSS +2 MB loaded, +7 MB once it has spoken. Raw output is at −20..−22 dBFS
active speech level with peaks at −2..−5 dBFS, so the level step changes it little.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from xml.sax.saxutils import escape

import espeakng_loader
import numpy as np
import numpy.typing as npt

from callhook.speech.tts import SynthesisError, telephone_audio

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000  # report bad data as an error instead of exit()ing the process
_CHARS_UTF8 = 1
_SSML = 0x10  # espeakSSML: the text is SSML (espeak-ng's markup.md)
_ENDPAUSE = 0x1000  # the pause after the last sentence, so joined prompts do not run together
_POS_CHARACTER = 1
_EE_OK = 0

# int SynthCallback(short *wav, int numsamples, espeak_EVENT *events); non-zero aborts.
_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


class _EspeakVoice(ctypes.Structure):
    _fields_ = (
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_void_p),  # (priority byte, NUL-terminated name)*, then a 0 byte
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    )


def _languages(address: int) -> list[tuple[int, str]]:
    """Decode an espeak_VOICE ``languages`` field: [(priority, language)]."""
    found = []
    while priority := ctypes.c_ubyte.from_address(address).value:
        language = ctypes.string_at(address + 1)
        found.append((priority, language.decode().lower()))
        address += len(language) + 2
    return found


class _Library:
    """The process's espeak-ng: loaded and initialised once, used under :attr:`lock`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lib: ctypes.CDLL | None = None
        self.rate = 0
        # voice name → (espeak identifier, [(priority, language)])
        self.voices: dict[str, tuple[str, list[tuple[int, str]]]] = {}
        self.samples: list[npt.NDArray[np.int16]] = []
        self.current = ""  # the voice espeak is set to, to skip resetting it
        self.callback = _SynthCallback(self._collect)  # kept alive: C holds a pointer

    def _collect(self, wav: ctypes._Pointer[ctypes.c_short], count: int, _events: int) -> int:
        if count > 0 and wav:
            self.samples.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        return 0


_SHARED = _Library()


class EspeakEngine:
    """espeak-ng voices, one per espeak voice file: many languages, tiny cost."""

    name = "espeak"

    def __init__(self) -> None:
        # espeak-ng has one state per process (espeak_Initialize, its synth callback, its
        # current voice): every engine shares it, under one lock. Each engine initialising
        # its own once crashed a process that had two (a segfault in espeak_Synth).
        self._shared = _SHARED

    def _init(self) -> ctypes.CDLL:
        """Load and initialise the library once; the caller holds the lock."""
        if self._shared.lib is not None:
            return self._shared.lib
        try:
            lib = ctypes.CDLL(espeakng_loader.get_library_path())
            data = espeakng_loader.get_data_path().encode()
        except (OSError, RuntimeError) as exc:
            raise SynthesisError(f"espeak-ng is not usable: {exc}") from exc
        lib.espeak_Initialize.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int)
        lib.espeak_SetSynthCallback.argtypes = (_SynthCallback,)
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_ListVoices.argtypes = (ctypes.c_void_p,)
        lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_EspeakVoice))
        lib.espeak_SetVoiceByName.argtypes = (ctypes.c_char_p,)
        lib.espeak_Synth.argtypes = (
            ctypes.c_char_p,  # text
            ctypes.c_size_t,  # size, with the terminating NUL
            ctypes.c_uint,  # position
            ctypes.c_int,  # position type
            ctypes.c_uint,  # end position (0: none)
            ctypes.c_uint,  # flags
            ctypes.c_void_p,  # unique identifier out (unused)
            ctypes.c_void_p,  # user data
        )
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data, _INITIALIZE_DONT_EXIT)
        if rate <= 0:
            raise SynthesisError(f"espeak-ng failed to initialise ({rate})")
        lib.espeak_SetSynthCallback(self._shared.callback)
        listed = lib.espeak_ListVoices(None)
        i = 0
        while listed[i]:
            voice = listed[i].contents
            identifier = (voice.identifier or b"").decode()
            name = identifier.rsplit("/", 1)[-1].lower()
            if name and voice.languages and name not in self._shared.voices:
                self._shared.voices[name] = (identifier, _languages(voice.languages))
            i += 1
        self._shared.rate, self._shared.lib = rate, lib
        return lib

    def voices(self) -> Sequence[str]:
        with self._shared.lock:
            self._init()
            return sorted(self._shared.voices)

    def voice_for(self, language: str) -> str | None:
        tag = language.replace("_", "-").lower()
        with self._shared.lock:
            self._init()
            for wanted in (tag, tag.split("-")[0]):
                if wanted in self._shared.voices:  # a voice of that very name (en-us, fr, de)
                    return wanted
                ranked = sorted(
                    (priority, name)
                    for name, (_, languages) in self._shared.voices.items()
                    for priority, spoken in languages
                    if spoken == wanted
                )
                if ranked:
                    return ranked[0][1]
        return None

    def warm_up(self) -> None:
        with self._shared.lock:
            self._init()

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> npt.NDArray[np.int16]:
        with self._shared.lock:
            lib = self._init()
            if voice not in self._shared.voices:
                raise SynthesisError(f"espeak has no voice {voice!r}")
            if voice != self._shared.current:
                if lib.espeak_SetVoiceByName(self._shared.voices[voice][0].encode()) != _EE_OK:
                    raise SynthesisError(f"espeak could not select voice {voice!r}")
                self._shared.current = voice
            flags = _CHARS_UTF8 | _ENDPAUSE
            if rate != 1.0:
                # espeak-ng reads SSML itself: the rate as its prosody element.
                text = f'<speak><prosody rate="{rate * 100:.0f}%">{escape(text)}</prosody></speak>'
                flags |= _SSML
            encoded = text.encode()
            self._shared.samples = []
            status = lib.espeak_Synth(
                encoded, len(encoded) + 1, 0, _POS_CHARACTER, 0, flags, None, None
            )
            samples, self._shared.samples = self._shared.samples, []
            if status != _EE_OK:
                raise SynthesisError(f"espeak could not speak {text!r} (error {status})")
            rate = self._shared.rate
        if not samples:
            return np.zeros(0, dtype=np.int16)
        return telephone_audio(np.concatenate(samples).astype(np.float32) / 32768, rate)
