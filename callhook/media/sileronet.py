"""The Silero VAD network at 8 kHz: its weights, read from the model file, and one window
through it, in C (``_silero.c``) with this module's numpy forward pass as the reference.

Why callhook runs the network itself rather than through onnxruntime: the network is
small (an STFT as a strided convolution, four convolutions with ReLU, one LSTM cell, a
1x1 convolution and a sigmoid: about 0.4 million multiply-adds a window), and a run of
the ONNX session from Python costs about 90 µs whatever it holds, four times the
arithmetic. Handed to a thread of its own so the event loop could do other work
meanwhile, it still made the loop wait for it: under load the loop slept there 15% of
its time (bench/RESULTS.md). In C, a window costs a few tens of microseconds on the
caller's thread, with no hand-over.

The weights are the ``silero_vad.onnx`` file's 8 kHz branch (the model's top-level
``If`` on the sample rate; its ``else`` branch), read with the ``onnx`` package once per
process. Both forward passes compute what that branch does (tests/unit/media/
test_sileronet.py compares them with onnxruntime's run of the file, window after
window, on recorded speech):

1. the input (32 samples of context and 256 new, on the [-1, 1) scale) padded on the
   right by reflection with 32 samples;
2. the STFT: a convolution with 130 filters of 128 taps at a hop of 64 (4 frames), the
   magnitude of each of the 65 bins (real and imaginary rows);
3. the encoder: convolutions of 3 taps, padding 1, each followed by a ReLU: 65 to 128
   channels (stride 1), 128 to 64 (stride 2), 64 to 64 (stride 2), 64 to 128 (stride 1),
   leaving one frame;
4. one step of an LSTM of 128 units from the state (h, c) given (PyTorch's gates: input,
   forget, cell, output), the new state returned;
5. the decoder: ReLU of h, a 1x1 convolution to one channel, the sigmoid.

The numbers of the two passes differ from onnxruntime's in the last bits (sums taken in
another order): by less than 1e-5 in a probability (the tests' bound; about 2e-6 on
recorded speech).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

logger = logging.getLogger("callhook.media")

#: The model's input (context and window) and state sizes, in float32.
INPUT: Final = 288
STATE: Final = 256

#: The 8 kHz branch's arrays the network needs, in the order ``_silero.Network`` takes
#: them, with their shapes (a model file that differs is refused, not misread).
ARRAYS: Final[tuple[tuple[str, tuple[int, ...]], ...]] = (
    ("stft.forward_basis_buffer", (130, 1, 128)),
    ("encoder.0.reparam_conv.weight", (128, 65, 3)),
    ("encoder.0.reparam_conv.bias", (128,)),
    ("encoder.1.reparam_conv.weight", (64, 128, 3)),
    ("encoder.1.reparam_conv.bias", (64,)),
    ("encoder.2.reparam_conv.weight", (64, 64, 3)),
    ("encoder.2.reparam_conv.bias", (64,)),
    ("encoder.3.reparam_conv.weight", (128, 64, 3)),
    ("encoder.3.reparam_conv.bias", (128,)),
    ("decoder.rnn.weight_ih", (512, 128)),
    ("decoder.rnn.weight_hh", (512, 128)),
    ("decoder.rnn.bias_ih", (512,)),
    ("decoder.rnn.bias_hh", (512,)),
    ("decoder.decoder.2.weight", (1, 128, 1)),
    ("decoder.decoder.2.bias", (1,)),
)
#: How the exporter prefixed the 8 kHz branch's constants.
_BRANCH_PREFIX: Final = "If_0_else_branch__Inline_0__"


class Network(Protocol):
    """One window through the network (:class:`ReferenceNetwork` or ``_silero.Network``)."""

    def window(self, input: npt.NDArray[np.float32], state: npt.NDArray[np.float32]) -> float:
        """The probability that ``input``'s window (288 float32) is speech; ``state`` (256
        float32, C-contiguous: h then c) is replaced, in place, by the state after it."""
        ...


def read_weights(path: Path) -> list[npt.NDArray[np.float32]]:
    """The 8 kHz branch's arrays of the model file at ``path``, in :data:`ARRAYS`' order.

    Raises ``ValueError`` naming what is missing or of another shape."""
    import onnx  # loaded once per process, when the first call listens
    from onnx import numpy_helper

    model = onnx.load(str(path))
    found: dict[str, npt.NDArray[np.float32]] = {}
    for node in model.graph.node:
        if node.op_type != "If":
            continue
        for attribute in node.attribute:
            if attribute.name != "else_branch":
                continue
            for inner in attribute.g.node:
                name = inner.output[0] if inner.output else ""
                if inner.op_type == "Constant" and name.startswith(_BRANCH_PREFIX):
                    value = numpy_helper.to_array(inner.attribute[0].t)
                    found[name.removeprefix(_BRANCH_PREFIX)] = value
    arrays = []
    for name, shape in ARRAYS:
        array = found.get(name)
        if array is None or array.shape != shape:
            got = "missing" if array is None else f"of shape {array.shape}"
            raise ValueError(f"{path}: the 8 kHz network's {name} is {got}, not {shape}")
        arrays.append(np.ascontiguousarray(array, dtype=np.float32))
    return arrays


def _conv_relu(
    x: npt.NDArray[np.float32],
    weight: npt.NDArray[np.float32],
    bias: npt.NDArray[np.float32],
    stride: int,
) -> npt.NDArray[np.float32]:
    """ReLU of a 1-D convolution of ``x`` (channels, frames), 3 taps, padding 1."""
    padded = np.pad(x, ((0, 0), (1, 1)))
    frames = (x.shape[1] + 2 - 3) // stride + 1
    out = np.empty((weight.shape[0], frames), dtype=np.float32)
    for t in range(frames):
        out[:, t] = np.einsum("oik,ik->o", weight, padded[:, t * stride : t * stride + 3]) + bias
    return np.maximum(out, np.float32(0))


def _sigmoid(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return np.float32(1) / (np.float32(1) + np.exp(-x))


class ReferenceNetwork:
    """The network's forward pass in numpy, step by step as the module docstring lists
    them: the reference the C network is tested against, and what runs where the C
    extension could not be built (more than ten times its cost)."""

    def __init__(self, arrays: list[npt.NDArray[np.float32]]) -> None:
        (
            self._basis,
            *encoder,
            self._w_ih,
            self._w_hh,
            self._b_ih,
            self._b_hh,
            w_out,
            b_out,
        ) = arrays
        self._encoder = [(encoder[2 * i], encoder[2 * i + 1]) for i in range(4)]
        self._w_out = w_out[0, :, 0]
        self._b_out = b_out[0]

    def window(self, input: npt.NDArray[np.float32], state: npt.NDArray[np.float32]) -> float:
        """See :class:`Network`."""
        x = input.reshape(INPUT)
        padded = np.concatenate([x, x[-2:-34:-1]])  # reflection: the edge sample not repeated
        frames = np.lib.stride_tricks.sliding_window_view(padded, 128)[::64]  # (4, 128)
        spec = self._basis[:, 0, :] @ frames.T  # (130, 4)
        h = np.sqrt(spec[:65] ** 2 + spec[65:] ** 2)
        for (weight, bias), stride in zip(self._encoder, (1, 2, 2, 1), strict=True):
            h = _conv_relu(h, weight, bias, stride)
        flat = state.reshape(2, 128)
        hidden, cell = flat[0], flat[1]
        gates = self._w_ih @ h[:, 0] + self._b_ih + self._w_hh @ hidden + self._b_hh
        i, f, g, o = gates[:128], gates[128:256], gates[256:384], gates[384:]
        cell = _sigmoid(f) * cell + _sigmoid(i) * np.tanh(g)
        hidden = _sigmoid(o) * np.tanh(cell)
        flat[1] = cell
        flat[0] = hidden
        return float(_sigmoid(self._w_out @ np.maximum(hidden, np.float32(0)) + self._b_out))


_lock = threading.Lock()
_network: Network | None = None


def network(path: Path) -> Network:
    """The process's network with the weights of the model file at ``path``, built on
    first use (thread-safe): the C one, or the reference where it was not built (said
    once in the log)."""
    global _network
    if _network is None:
        with _lock:
            if _network is None:
                arrays = read_weights(path)
                try:
                    from callhook.media._silero import Network as Native
                except ImportError:
                    logger.warning(
                        "the speech model's C network is not built: its numpy reference runs"
                        " (more CPU per listening call; scripts/setup builds it)"
                    )
                    _network = ReferenceNetwork(arrays)
                else:
                    _network = Native(*arrays)
    return _network
