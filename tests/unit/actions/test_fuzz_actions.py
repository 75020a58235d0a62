"""Bad input, fuzzed: the action JSON a page answers (issue 14, item 5).

Property (``bench/fuzz.py --target actions``): ``parse_response`` returns the
actions or raises InvalidResponse listing problems, each with a JSON path and a
message; never another exception. Inputs: arbitrary bytes, mutated valid
responses, and JSON documents built from the real action and property names with
values of every JSON type, so the validators see nearly-valid actions.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz import TARGETS, check_of, strategy
from callhook.actions.catalogue import ACTION_MODELS

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Every property name of every model (play lists, menus, speech options... nested
# models included), so generated objects hit the real fields and their validators.
_NAMES: set[str] = {"actions", "token", "api_version", "play", "url", "method"}
_seen: set[type] = set()
_todo: list[Any] = list(ACTION_MODELS.values())
while _todo:
    model = _todo.pop()
    if model in _seen or not hasattr(model, "model_fields"):
        continue
    _seen.add(model)
    for name, info in model.model_fields.items():
        _NAMES.add(name)
        for arg in getattr(info.annotation, "__args__", ()) or ():
            _todo.append(arg)
        _todo.append(info.annotation)
_NAMES |= set(ACTION_MODELS)
KEYS = st.sampled_from(sorted(_NAMES)) | st.text(max_size=5)

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.sampled_from(["", "1", "#", "*", "https://example.com/p", "a.wav", "en-US", "0" * 300])
    | st.text(max_size=12)
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=25,
)


@FUZZ
@given(strategy(TARGETS["actions"], max_size=1500))
def test_fuzz_action_bytes(data: bytes) -> None:
    check_of("actions")(data)


@FUZZ
@given(st.lists(st.dictionaries(st.sampled_from(sorted(ACTION_MODELS)), JSON, max_size=2)))
def test_fuzz_action_lists(actions: list[dict[str, Any]]) -> None:
    check_of("actions")(json.dumps({"actions": actions}).encode())


@FUZZ
@given(JSON)
def test_fuzz_any_json_document(document: Any) -> None:
    check_of("actions")(json.dumps(document).encode())


def test_deep_nesting_is_a_problem_not_a_crash() -> None:
    check_of("actions")(b'{"actions": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
