"""Every call's received audio frames of one media tick, decoded and measured at once. Sans-IO.

The media tick (``adapters/media.py``) receives about one 20 ms G.711 frame
per call. Each needs its samples (for the speech model, in-band DTMF, the
level meter, live transcription) and its energy (the voice-activity gate,
which runs on every frame of every call). Done frame by frame, that is two
small numpy calls per packet whose fixed cost (~2-3 µs each) is most of their
price: profiled at 300 calls (issue 19), G.711 decoding and the frame energy
took a fifth of the media tick. :func:`measure` does it for the whole tick in
one table look-up and one row-wise product per law: the frames' codes are
joined into one ``(frames, 160)`` array, decoded through the law's table, and
each row's mean square is taken in float64 (exact: a sum of at most 160
squares of int16 is below 2**53), as :func:`frame_power` does for one frame,
so a frame measured here or alone gives the same figure to the bit.

Frames that are not 160 bytes (a 30 ms packetisation, an odd packet) are
measured one by one, in their place.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from callhook.media import g711

FRAME = 160  # bytes (samples) of a 20 ms G.711 frame

Samples = npt.NDArray[np.int16]


def frame_power(samples: Samples) -> float:
    """Mean square of ``samples`` (int16 scale), 0.0 for no samples."""
    if not len(samples):
        return 0.0
    f = samples.astype(np.float64)
    return float(f @ f) / len(f)


def measure(law: g711.Law, payloads: list[bytes]) -> tuple[list[Samples], list[float]]:
    """The samples and mean-square power of each G.711 payload in ``law``, in order.

    The samples of the 20 ms frames are rows of one array (read-only views:
    whoever keeps one must not write to it).
    """
    whole = [p for p in payloads if len(p) == FRAME]
    rows: list[Samples] = []
    row_powers: list[float] = []
    if whole:
        codes = np.frombuffer(b"".join(whole), dtype=np.uint8).reshape(len(whole), FRAME)
        decoded = g711.decode_array(law, codes)
        decoded.flags.writeable = False
        f = decoded.astype(np.float64)
        rows = list(decoded)
        row_powers = (np.einsum("ij,ij->i", f, f) / FRAME).tolist()
    if len(whole) == len(payloads):
        return rows, row_powers
    # Some frames of another length: each in its place, the others from the batch.
    samples: list[Samples] = []
    powers: list[float] = []
    k = 0
    for payload in payloads:
        if len(payload) == FRAME:
            samples.append(rows[k])
            powers.append(row_powers[k])
            k += 1
        else:
            one = g711.decode(law, payload)
            samples.append(one)
            powers.append(frame_power(one))
    return samples, powers
