"""The speech model's network run by callhook (callhook.media.sileronet): the C network
and the numpy reference against onnxruntime's run of the model file, window after
window on recorded speech and noise; the weights read from the file; the C type's
arguments; the reference where the C extension is not built."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime
import pytest

from bench.vad import edges, line, noise_clip
from callhook.media import silero, sileronet, tones
from callhook.media._silero import Network as Native
from callhook.media.sileronet import INPUT, STATE, ReferenceNetwork, read_weights
from callhook.media.vad import VoiceActivityDetector
from tests.native import without

SPEECH = sorted((Path(__file__).parents[2] / "data" / "speech").glob("*.wav"))


def load(path: Path) -> npt.NDArray[np.int16]:
    import wave

    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)


@pytest.fixture(scope="module")
def arrays() -> list[npt.NDArray[np.float32]]:
    return read_weights(silero.model_path())


def windows() -> list[npt.NDArray[np.float32]]:
    """Model inputs (context and window) of a long line: ten clips of speech with -50
    dBFS hiss between them, then a second of a noise mixture, then digital silence."""
    parts: list[npt.NDArray[np.int16]] = []
    for path in SPEECH[::4]:
        parts += [line(tones.white_noise(0.3, -50.0, seed=len(parts))), load(path)]
    parts += [line(noise_clip("mix", -40.0, 5)), np.zeros(4000, np.int16)]
    x = np.concatenate(parts).astype(np.float32) * np.float32(1 / 32768)
    made = []
    context = np.zeros(32, np.float32)
    for k in range(len(x) // 256):
        window = x[k * 256 : (k + 1) * 256]
        made.append(np.concatenate([context, window])[None, :])
        context = window[-32:]
    return made


def onnxruntime_run() -> tuple[list[float], list[npt.NDArray[np.float32]]]:
    """The file's own run, window after window from a zero state: probabilities, states."""
    session = onnxruntime.InferenceSession(str(silero.model_path()))
    state = np.zeros((2, 1, 128), np.float32)
    probabilities, states = [], []
    for window in windows():
        out, state = session.run(
            None, {"input": window, "state": state, "sr": np.array(8000, np.int64)}
        )
        probabilities.append(float(out[0, 0]))
        states.append(np.asarray(state, np.float32))
    return probabilities, states


@pytest.mark.parametrize("kind", ["C", "numpy"])
def test_the_network_gives_what_onnxruntime_gives(
    kind: str, arrays: list[npt.NDArray[np.float32]]
) -> None:
    network: sileronet.Network = Native(*arrays) if kind == "C" else ReferenceNetwork(arrays)
    inputs = windows()
    expected, states = onnxruntime_run()
    assert sum(p > 0.5 for p in expected) > 50 and sum(p < 0.1 for p in expected) > 50
    # Its own trajectory from a zero state, never put back on onnxruntime's: a
    # difference that grew from window to window would show.
    state = np.zeros((2, 1, 128), np.float32)
    got = [network.window(window, state) for window in inputs]
    assert np.max(np.abs(np.array(got) - np.array(expected))) < 1e-5
    assert np.max(np.abs(state - states[-1])) < 1e-4
    # Each window from onnxruntime's state before it: the state after it within a few
    # units of the last place kept.
    for k in range(1, len(inputs)):
        step = states[k - 1].copy()
        network.window(inputs[k], step)
        assert np.max(np.abs(step - states[k])) < 1e-4


def test_the_c_network_and_its_reference_hear_the_same_utterances(
    arrays: list[npt.NDArray[np.float32]],
) -> None:
    native, reference = Native(*arrays), ReferenceNetwork(arrays)
    for path in SPEECH[1::8]:
        x = line(load(path))
        got = edges(x, VoiceActivityDetector(silero.SileroStream(native)))
        want = edges(x, VoiceActivityDetector(silero.SileroStream(reference)))
        assert got == want and got


def test_the_process_has_one_network_of_the_file() -> None:
    assert sileronet.network(silero.model_path()) is sileronet.network(silero.model_path())
    assert isinstance(sileronet.network(silero.model_path()), Native)


def test_a_model_file_of_another_shape_is_refused(tmp_path: Path) -> None:
    import onnx

    model = onnx.load(str(silero.model_path()))
    for node in model.graph.node:
        for attribute in node.attribute:
            if attribute.name == "else_branch":
                for inner in attribute.g.node:
                    if inner.output[0].endswith("decoder.rnn.bias_hh"):
                        tensor = inner.attribute[0].t
                        tensor.dims[0] = 256
                        tensor.raw_data = tensor.raw_data[:1024]
    changed = tmp_path / "other.onnx"
    onnx.save(model, str(changed))
    with pytest.raises(ValueError, match=r"decoder.rnn.bias_hh is of shape \(256,\), not \(512,\)"):
        read_weights(changed)
    empty = tmp_path / "empty.onnx"
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph([], "empty", [], [])), str(empty))
    with pytest.raises(ValueError, match=r"stft\.forward_basis_buffer is missing"):
        read_weights(empty)


def test_the_c_type_checks_what_it_is_given(arrays: list[npt.NDArray[np.float32]]) -> None:
    with pytest.raises(TypeError, match="takes 15 arrays"):
        Native(*arrays[:-1])
    with pytest.raises(ValueError, match="array 3 is not 24576 float32"):
        Native(*arrays[:3], arrays[3][:10], *arrays[4:])
    with pytest.raises(ValueError, match="array 0 is not"):
        Native(arrays[0].astype(np.float64), *arrays[1:])
    network = Native(*arrays)
    state = np.zeros(STATE, np.float32)
    with pytest.raises(ValueError, match="input is not 288 float32"):
        network.window(np.zeros(INPUT - 1, np.float32), state)
    with pytest.raises(ValueError, match="input is not 288 float32"):
        network.window(np.zeros(INPUT, np.float64), state)
    with pytest.raises(ValueError, match="state is not 256 float32"):
        network.window(np.zeros(INPUT, np.float32), np.zeros(STATE, np.int32))
    frozen = np.zeros(STATE, np.float32)
    frozen.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        network.window(np.zeros(INPUT, np.float32), frozen)
    # None of that changed the state given; a good call does.
    assert not state.any()
    network.window(np.full(INPUT, 0.1, np.float32), state)
    assert state.any()
    with pytest.raises(ValueError, match="no weights"):
        Native.__new__(Native).window(np.zeros(INPUT, np.float32), state)


FALLBACK = """
import logging
import sys
import numpy as np
from callhook.media import silero, sileronet
logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stdout)
stream = silero.SileroStream()
assert isinstance(stream._net, sileronet.ReferenceNetwork), stream._net
silero.SileroStream()
print(round(max(stream.probability(np.full(160, v, np.int16)) for v in range(0, 4000, 80)), 3))
"""


def test_without_the_extension_the_reference_runs_said_once() -> None:
    printed = without(["callhook.media._silero"], FALLBACK).splitlines()
    assert printed[:-1] == [
        "the speech model's C network is not built: its numpy reference runs"
        " (more CPU per listening call; scripts/setup builds it)"
    ]
    assert 0.0 <= float(printed[-1]) <= 1.0


WARMED = """
from callhook.edge.speechworkers import SpeechService
from callhook.media import sileronet
service = SpeechService(None, None, workers=1)
assert sileronet._network is None
service.warm_up()
for loading in service.warming:
    loading.result()
print(type(sileronet._network).__name__)
"""


def test_serve_loads_the_weights_at_its_start_not_at_the_first_call() -> None:
    assert without([], WARMED).strip() == "Network"
