"""Every call's received audio frames of one media tick, decoded and measured at once. Sans-IO.

The media tick (``edge/mediaengine.py``) receives about one 20 ms G.711 frame per
call. Each needs its samples (for the speech model, in-band DTMF, the level
meter, live transcription) and its energy (the voice-activity gate, which runs
on every frame of every call). Done frame by frame, that is two small numpy
calls per packet whose fixed cost (~2-3 µs each) is most of their price:
profiled at 300 calls (issue 19), G.711 decoding and the frame energy took a
fifth of the media tick. :func:`measure` does it for the whole tick at once per
law: the frames are decoded through the law's table into one ``(frames, 160)``
array, and each row's mean square is the exact sum of its squares (below 2**53)
over its length, as :func:`frame_power` takes it for one frame in float64, so a
frame measured here or alone gives the same figure to the bit. Calls that listen
for in-band DTMF (no telephone-event negotiated) also get the tone detector's
prefilter (:func:`callhook.media.dtmf.candidates`) over all their frames in one
matrix product: most frames are turned away there.

Frames that are not 160 bytes (a 30 ms packetisation, an odd packet) are
measured one by one, in their place.

The 20 ms frames are decoded and measured in C (``_frames.c``: one pass over each
payload, no temporaries), where the extension was built; :func:`decode_measure_python`,
the numpy path (a join, a table look-up, a float64 copy and a row-wise product), is the
reference and runs where it was not, or for payloads that are not ``bytes``. What the
C path saves is measured in bench/RESULTS.md.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from callhook.media import dtmf, g711

FRAME = 160  # bytes (samples) of a 20 ms G.711 frame

Samples = npt.NDArray[np.int16]


def frame_power(samples: Samples) -> float:
    """Mean square of ``samples`` (int16 scale), 0.0 for no samples."""
    if not len(samples):
        return 0.0
    f = samples.astype(np.float64)
    return float(f @ f) / len(f)


class Measured(NamedTuple):
    """What :func:`measure` found in each frame, in the order of the payloads."""

    samples: list[Samples]
    powers: list[float]
    #: The in-band DTMF prefilter's verdict (:func:`callhook.media.dtmf.candidates`) on
    #: each 20 ms frame, when asked for; None for a frame it did not judge.
    tones: list[bool | None]


#: Each law's decoding table (256 int16 samples), which the C path reads.
_TABLES: dict[str, npt.NDArray[np.int16]] = {"ulaw": g711.ULAW_DECODE, "alaw": g711.ALAW_DECODE}


def decode_measure_python(law: g711.Law, payloads: list[bytes]) -> tuple[Samples, list[float]]:
    """The samples of ``payloads`` (each :data:`FRAME` bytes), one row each, and each
    row's mean square: the reference of :func:`decode_measure`, in numpy."""
    codes = np.frombuffer(b"".join(payloads), dtype=np.uint8).reshape(len(payloads), FRAME)
    decoded = g711.decode_array(law, codes)
    f = decoded.astype(np.float64)
    powers: list[float] = (np.einsum("ij,ij->i", f, f) / FRAME).tolist()
    return decoded, powers


def decode_measure_native(law: g711.Law, payloads: list[bytes]) -> tuple[Samples, list[float]]:
    """:func:`decode_measure_python` in C (``_frames.c``): the same rows and powers."""
    decoded = np.empty((len(payloads), FRAME), dtype=np.int16)
    try:
        return decoded, _frames.decode_measure(_TABLES[law], payloads, decoded)
    except TypeError:  # a payload that is not bytes (a bytearray, a view): numpy takes it
        return decode_measure_python(law, payloads)


try:
    from callhook.media import _frames
except ImportError:  # no C compiler where callhook was installed
    decode_measure = decode_measure_python
else:
    decode_measure = decode_measure_native


def native() -> bool:
    """Whether the tick's frames are decoded and measured in C (the extension was built)."""
    return decode_measure is decode_measure_native


def measure(law: g711.Law, payloads: list[bytes], *, tones: bool = False) -> Measured:
    """The samples and mean-square power of each G.711 payload in ``law``, in order, and
    with ``tones`` the DTMF prefilter's verdict on each 20 ms frame.

    The samples of the 20 ms frames are rows of one array (read-only views:
    whoever keeps one must not write to it).
    """
    whole = [p for p in payloads if len(p) == FRAME]
    rows: list[Samples] = []
    row_powers: list[float] = []
    row_tones: list[bool | None] = [None] * len(whole)
    if whole:
        decoded, row_powers = decode_measure(law, whole)
        decoded.flags.writeable = False
        rows = list(decoded)
        if tones:
            row_tones = list(dtmf.candidates(decoded))
    if len(whole) == len(payloads):
        return Measured(rows, row_powers, row_tones)
    # Some frames of another length: each in its place, the others from the batch.
    samples: list[Samples] = []
    powers: list[float] = []
    verdicts: list[bool | None] = []
    k = 0
    for payload in payloads:
        if len(payload) == FRAME:
            samples.append(rows[k])
            powers.append(row_powers[k])
            verdicts.append(row_tones[k])
            k += 1
        else:
            one = g711.decode(law, payload)
            samples.append(one)
            powers.append(frame_power(one))
            verdicts.append(None)
    return Measured(samples, powers, verdicts)
