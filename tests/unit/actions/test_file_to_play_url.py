"""``file_to_play`` as a web page request object: what is accepted, and where it points.

Aculab's play media: the object's URL is absolute or relative to the page that
returned the action, only GET is allowed, and ``decryption_cipher`` cannot go
with it. The relative URL is resolved when the prompt starts, against the page
the running action list came from (``ActionContext.page_url``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from callhook.actions.machine import ActionContext, Prompter, prompt_items
from callhook.actions.response import InvalidResponse, parse_response
from callhook.actions.schema import MediaPageRequest, Play
from callhook.events import PlayFile, PlayUrl, StartPrompt

CIPHER = {"type": "aescbc", "key": "0" * 64, "initialisation_vector": "0" * 32}


def play_of(*items: Any) -> Play:
    (play,) = parse_response(
        json.dumps({"actions": [{"play": {"play_list": list(items)}}]})
    ).actions
    assert isinstance(play, Play)
    return play


def problem(*items: Any) -> str:
    with pytest.raises(InvalidResponse) as info:
        play_of(*items)
    (only,) = info.value.problems
    return str(only)


def test_a_web_page_request_is_accepted_with_get_by_default() -> None:
    play = play_of({"file_to_play": {"url": "prompts/hello.wav"}})
    assert play.play_list[0].file_to_play == MediaPageRequest(url="prompts/hello.wav")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"file_to_play": {"url": "/a.wav", "method": "POST"}}, "file_to_play.method: "),
        ({"file_to_play": {"url": "/a.wav"}, "decryption_cipher": CIPHER}, "cannot be used when"),
        ({"file_to_play": {"url": "file:///etc/passwd"}}, "expected an http or https URL"),
        ({"file_to_play": {"url": "/a.wav", "x": 1}}, "file_to_play.x: unknown property"),
        ({"file_to_play": 7}, "a file name of the media file store, or a web page request"),
    ],
)
def test_what_a_web_file_may_not_be(item: dict[str, Any], expected: str) -> None:
    assert expected in problem(item)


@pytest.mark.parametrize(
    ("page", "url", "resolved"),
    [
        ("https://app.example/ivr/start", "prompts/a.wav", "https://app.example/ivr/prompts/a.wav"),
        ("https://app.example/ivr/start", "/media/a.wav", "https://app.example/media/a.wav"),
        ("https://app.example/ivr/start", "http://cdn.example/a.wav", "http://cdn.example/a.wav"),
    ],
)
def test_a_relative_url_resolves_against_the_page_that_returned_the_action(
    page: str, url: str, resolved: str
) -> None:
    play = play_of({"file_to_play": {"url": url}}, {"file_to_play": "local.wav"})
    assert prompt_items(play, None, page) == (PlayUrl(resolved), PlayFile("local.wav"))


def test_the_prompter_uses_the_running_lists_page() -> None:
    ctx = ActionContext(page_url="http://127.0.0.1:5000/app/menu")
    (start,) = Prompter(ctx).start(play_of({"file_to_play": {"url": "hello.wav"}}))
    assert isinstance(start, StartPrompt)
    assert start.items == (PlayUrl("http://127.0.0.1:5000/app/hello.wav"),)
