"""A streaming recogniser plug-in: how soon after the caller stops is the answer ready?

    .venv/bin/python -m bench.plugin_stream [--clips 300]

The example plug-in's ``pocketsphinx-live`` (``examples/speech_plugin``) on FSDD spoken
digits as a call hears them (1 s of line noise around each, µ-law, cut by the call's
voice-activity detector), word hints zero..nine, each utterance decoded two ways on one
thread:

* **streamed**, as callhook hands it to a recogniser with ``stream``: 200 ms pieces fed
  as the caller speaks, then ``finish`` at the end. The answer waits only for the last
  piece and ``finish``: that is the latency printed (a piece's feed must also keep up
  with speech, so its time is printed beside the 200 ms it covers);
* **whole**, as any other recogniser gets it: ``recognise`` on the utterance once it has
  ended, all of which is latency.

Printed: p50 / p95 of each latency in milliseconds, the share of digits right each way
(the two differ a little: the resampler runs on pieces), and the feeds' p95.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from bench.asr import DIGITS, FSDD, load_wav, on_the_line
from callhook.events import RecognitionOptions
from callhook.media.utterances import FRAME, PIECE_FRAMES

EXAMPLE = Path(__file__).parents[1] / "examples" / "speech_plugin"
#: The suite's few clips where the full set (``../shared``) is not there.
SMALL = Path(__file__).parents[1] / "tests" / "data" / "speech"


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", type=int, default=300, help="FSDD clips (every nth)")
    args = parser.parse_args()
    sys.path.insert(0, str(EXAMPLE))
    from callhook_example_speech.sphinxstream import PocketsphinxLive

    engine = PocketsphinxLive("live", {})
    engine.warm_up()
    options = RecognitionOptions(word_hints=DIGITS)
    piece = PIECE_FRAMES * FRAME
    streamed: list[float] = []
    whole: list[float] = []
    feeds: list[float] = []
    right = {"streamed": 0, "whole": 0}
    count = 0
    files = sorted((FSDD if FSDD.is_dir() else SMALL).glob("*.wav"))
    files = files[:: max(1, len(files) // args.clips)]
    for n, path in enumerate(files):
        digit = int(path.name.split("_")[0])
        utterance = on_the_line(load_wav(path), n)
        if utterance is None:
            continue
        count += 1
        stream = engine.stream(options)
        pieces = [utterance[i : i + piece] for i in range(0, len(utterance), piece)]
        for audio_piece in pieces[:-1]:
            start = time.perf_counter()
            stream.feed(audio_piece)
            feeds.append(time.perf_counter() - start)
        start = time.perf_counter()  # the end of speech: the last piece, then the answer
        stream.feed(pieces[-1])
        answer = stream.finish()
        streamed.append(time.perf_counter() - start)
        right["streamed"] += bool(answer) and answer[0].text == DIGITS[digit]
        start = time.perf_counter()
        answer = engine.recognise(utterance, options)
        whole.append(time.perf_counter() - start)
        right["whole"] += bool(answer) and answer[0].text == DIGITS[digit]
    print(f"pocketsphinx-live, {count} utterances, hints zero..nine, one thread")
    print(f"{'':10} {'answer after the end p50 / p95 ms':>36} {'digits right':>14}")
    for name, times in (("streamed", streamed), ("whole", whole)):
        print(
            f"{name:10} {percentile(times, 50):>24.1f} / {percentile(times, 95):<9.1f}"
            f" {100 * right[name] / count:>13.1f}%"
        )
    print(f"each 200 ms piece fed in p95 {percentile(feeds, 95):.1f} ms (keeps up if < 200)")


if __name__ == "__main__":
    main()
