"""A recogniser plug-in that streams: pocketsphinx decoding the caller's words as they come.

callhook hands a recogniser that has ``stream(options)`` each utterance in pieces while the
caller is still speaking (a piece every 200 ms), then ``finish()`` when its voice-activity
detector has heard the end. An engine that decodes as it goes (a cloud service's
streaming API, an incremental decoder such as this one) has little left to do by then, so
the answer comes soon after the caller stops::

    [speech]
    recogniser = "live"

    [speech.engines.live]
    protocol = "plugin"
    plugin = "pocketsphinx-live"

It is the shape to copy for a cloud service: ``stream`` opens the service's stream (a
WebSocket), ``feed`` sends the audio, ``finish`` says "end of audio" and waits for the
final transcript, ``cancel`` closes it. callhook calls them on its recognition threads,
one at a time for a stream, and never on the thread that times the calls' audio.

With word hints the decoder listens for the hints only (a JSGF grammar of them), without
them for any English (pocketsphinx's bundled model). The confidence is pocketsphinx's
posterior, which a grammar of a few words puts near 1 whatever was said: an application
that needs to tell a hint from other speech uses callhook's embedded ``sphinx`` engine
(a garbage model and calibrated confidences) or Whisper.
"""

from __future__ import annotations

import queue
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import soxr

from callhook.events import Alternative, RecognitionOptions

#: pocketsphinx's bundled acoustic model listens at 16 kHz (the call's audio is 8 kHz).
MODEL_RATE = 16000


class PocketsphinxLive:
    """``factory(name, options)`` for ``callhook.recognisers`` (no options)."""

    languages = frozenset({"en"})

    def __init__(self, name: str, options: Mapping[str, Any]) -> None:
        if options:
            raise ValueError(f"unknown options: {', '.join(sorted(options))}")
        self.name = name
        # A decoder holds one utterance at a time and takes ~0.4 s to make: streams
        # borrow one from here and give it back.
        self._idle: queue.SimpleQueue[_Decoder] = queue.SimpleQueue()

    def warm_up(self) -> None:
        """Make the first decoder (callhook calls this once, off its event loop)."""
        self._idle.put(_Decoder())

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        """A whole utterance (callhook streams, but a recogniser also takes one whole)."""
        stream = self.stream(options)
        stream.feed(audio)
        return stream.finish()

    def stream(self, options: RecognitionOptions) -> LiveStream:
        """One utterance, fed as it is spoken."""
        try:
            decoder = self._idle.get_nowait()
        except queue.Empty:
            decoder = _Decoder()
        return LiveStream(decoder, options, self._idle)


class LiveStream:
    """One utterance on a borrowed decoder (callhook's ``RecognitionStream``)."""

    def __init__(
        self, decoder: _Decoder, options: RecognitionOptions, idle: queue.SimpleQueue[_Decoder]
    ) -> None:
        self._decoder = decoder
        self._idle = idle
        self._hints = decoder.listen_for(options.word_hints)
        self._resampler = soxr.ResampleStream(8000, MODEL_RATE, 1, dtype="int16")
        decoder.ps.start_utt()

    def feed(self, audio: npt.NDArray[np.int16]) -> None:
        """Decode the next piece now: by the utterance's end, nearly all of it is done."""
        self._process(self._resampler.resample_chunk(audio, last=False))

    def finish(self) -> tuple[Alternative, ...]:
        """The rest, and the best hypothesis."""
        ps = self._decoder.ps
        try:
            self._process(self._resampler.resample_chunk(np.zeros(0, np.int16), last=True))
            ps.end_utt()
            hyp = ps.hyp()
        finally:
            self._idle.put(self._decoder)
        if hyp is None or not hyp.hypstr.strip():
            return ()  # noise, a cough: callhook asks again
        text = self._hints.get(hyp.hypstr, hyp.hypstr)
        return (Alternative(text, min(float(ps.get_logmath().exp(hyp.prob)), 1.0)),)

    def cancel(self) -> None:
        """Nobody wants the answer (the caller hung up): the decoder goes back."""
        self._decoder.ps.end_utt()
        self._idle.put(self._decoder)

    def _process(self, pcm: npt.NDArray[np.int16]) -> None:
        if len(pcm):
            self._decoder.ps.process_raw(pcm.tobytes(), False, False)


class _Decoder:
    """A pocketsphinx decoder and the hint grammars it has loaded."""

    def __init__(self) -> None:
        from pocketsphinx import Decoder

        self.ps = Decoder(loglevel="ERROR")
        self.default = self.ps.current_search()
        self.grammars: set[str] = set()

    def listen_for(self, hints: tuple[str, ...]) -> dict[str, str]:
        """Activate the grammar of ``hints`` (none: any English); the hints by their
        decoded words. A hint with a word the dictionary has not got is left out."""
        spelled = {" ".join(_words(h)): h.strip() for h in hints}
        usable = {
            words: hint
            for words, hint in spelled.items()
            if words and all(self.ps.lookup_word(w) is not None for w in words.split())
        }
        if not usable:
            self.ps.activate_search(self.default)
            return {}
        name = f"h{abs(hash(tuple(sorted(usable)))):x}"
        if name not in self.grammars:
            rule = " | ".join(sorted(usable))
            self.ps.add_jsgf_string(name, f"#JSGF V1.0;\ngrammar h;\npublic <u> = {rule};\n")
            self.grammars.add(name)
        self.ps.activate_search(name)
        return usable


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())
