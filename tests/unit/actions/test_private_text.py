"""``text_is_private``: the text of a private item never reaches a log.

The places a text could leak are the call log's prompt lines (``call.py``) and
the problems of an invalid action list, which quote the values they are about
(``actions/response.py``), even when a long text would be shortened.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from callhook.actions.response import InvalidResponse, parse_response
from callhook.devtools.harness import AppServer, Caller, run_call

SECRET = "Your one time code is 4 3 2 1, valid for ten minutes, do not share it with anyone"


def private(text: str = SECRET) -> dict[str, Any]:
    return {"text_to_say": text, "text_is_private": True}


def problems(document: Any) -> list[str]:
    with pytest.raises(InvalidResponse) as info:
        parse_response(json.dumps(document))
    return [str(p) for p in info.value.problems]


@pytest.mark.parametrize(
    "document",
    [
        # a play action where one does not belong: the whole value is quoted...
        {"actions": [{"get_number": {"next_page": {"url": "/n"}, "prompt": [private()]}}]},
        # ...a wrong type for the text itself...
        {"actions": [{"play": {"play_list": [{**private(), "text_to_say": [SECRET]}]}}]},
        # ...a body that is not an object at all...
        [{"play": {"play_list": [private()]}}],
        # ...an action that is not one (its body is quoted).
        {"actions": [{"play": {"play_list": [private()]}, "extra": 1}]},
    ],
)
def test_problems_never_quote_a_private_text(document: Any) -> None:
    found = problems(document)
    assert found
    for problem in found:
        for part in ("4 3 2 1", "one time code", "Your one"):
            assert part not in problem, problem


def test_a_text_that_is_not_private_is_quoted_as_before() -> None:
    document = {"actions": [{"get_number": {"next_page": {"url": "/n"}, "prompt": ["hello"]}}]}
    (problem,) = problems(document)
    assert 'got ["hello"]' in problem


async def test_the_call_log_shows_a_private_prompt_without_its_text(app: AppServer) -> None:
    app.page(
        "/start",
        [
            {"play": {"play_list": [private(), {"text_to_say": "Goodbye."}]}},
            {
                "get_number": {
                    "prompt": {"play": {"play_list": [private()]}},
                    "next_page": {"url": "/n"},
                }
            },
        ],
    )
    app.page("/n", [])
    run = await run_call(app, Caller().press("5#", at=30.0).hang_up(at=60.0))
    text = "\n".join(run.log.lines)
    assert "4 3 2 1" not in text
    assert "say <private text>, say 'Goodbye.'" in text
    assert text.count("<private text>") == 2


def test_a_number_where_a_private_text_belongs_is_not_quoted() -> None:
    document = {"actions": [{"play": {"play_list": [{**private(), "text_to_say": 43219876}]}}]}
    (problem,) = problems(document)
    assert "43219876" not in problem and "<private text>" in problem


async def test_call_recording_cipher_is_accepted_checked_and_noted(app: AppServer) -> None:
    """Aculab's response-level call_recording_cipher: an Aculab app sends it; callhook
    makes no whole-call recording, so it is validated, never logged, and noted once."""
    key, iv = "ab" * 32, "cd" * 16
    cipher = {"type": "aescbc", "key": key, "initialisation_vector": iv}
    app.page(
        "/start",
        {
            "actions": [{"redirect": {"next_page": {"url": "/next"}}}],
            "call_recording_cipher": cipher,
        },
    )
    app.page("/next", {"actions": [], "call_recording_cipher": cipher})
    run = await run_call(app, Caller().hang_up(at=30))
    text = "\n".join(run.log.lines)
    assert text.count("call_recording_cipher ignored") == 1
    assert key not in text and iv not in text
    assert run.summary.errors == []
    bad = {"actions": [], "call_recording_cipher": {**cipher, "key": "xyz"}}
    (problem,) = problems(bad)
    assert problem.startswith("$.call_recording_cipher.key: ")
