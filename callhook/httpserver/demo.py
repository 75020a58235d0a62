"""The built-in demo application, served by callhook itself under ``/demo/``.

It is an ordinary voice application — it gets the same signed JSON page
requests any application gets and answers with action lists — so it doubles
as an example of how to write one:

1. ``start``: welcome, then ``get_number`` (any length, ended by ``#``);
2. ``number``: read the number back, then ``get_input``: say "sales" or
   "support", or press 1 or 2;
3. ``choice``: confirm the choice, then ``record`` a message after a beep;
4. ``recorded``: say how long it was, play it back, say goodbye, hang up.

It keeps its state in the ``token`` (the number entered), checks every
request's ``Callhook-Signature``, and answers the final page with 204.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from aiohttp import web

from callhook.signature import HEADER, verify

logger = logging.getLogger("callhook.demo")

PREFIX = "/demo"


def _say(*texts: str, barge_in: bool = True) -> dict[str, Any]:
    # A play action in its wire form: also how a prompt is written (docs/reference.md,
    # "Play action").
    return {
        "play": {
            "play_list": [{"text_to_say": t} for t in texts],
            "barge_in_on_digit": barge_in,
        }
    }


def _spoken_digits(number: str) -> str:
    return " ".join(number) if number else "nothing"


def start(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "actions": [
            _say("Welcome to the callhook demo."),
            {
                "get_number": {
                    "prompt": _say(
                        "Please enter a number, then press the hash key. "
                        "Press star to hear this again."
                    ),
                    "next_page": {"url": "number"},
                }
            },
            _say("No number then. Let's move on."),
            {"redirect": {"next_page": {"url": "number"}}},
        ],
        "token": "",
        "api_version": "2.0",
    }


def number(body: dict[str, Any]) -> dict[str, Any]:
    result = (body.get("action_result") or {}).get("result") or {}
    entered = str(result.get("entered_number", ""))
    actions: list[dict[str, Any]] = []
    if "entered_number" in result:
        actions.append(_say(f"You entered {_spoken_digits(entered)}."))
    actions += [
        {
            "get_input": {
                "prompt": _say(
                    "Would you like sales or support? "
                    "Say sales or support, or say or press 1 for sales, 2 for support."
                ),
                "speech_input_mode": "auto",
                "speech_recognition_options": {
                    "word_hints": [{"words": ["sales", "support", "one", "two"]}],
                },
                "digit_input_options": {"digit_count": 1, "valid_digits": "12"},
                "next_page": {"url": "choice"},
            }
        },
        _say("Never mind."),
        {"redirect": {"next_page": {"url": "choice"}}},
    ]
    return {"actions": actions, "token": entered}


def choice(body: dict[str, Any]) -> dict[str, Any]:
    result = (body.get("action_result") or {}).get("result") or {}
    picked = "neither"
    if result.get("input_type") == "digits":
        picked = {"1": "sales", "2": "support"}.get(str(result.get("digits_input")), "neither")
    elif result.get("input_type") == "speech":
        heard = " ".join(
            str(alt.get("text", "")).lower()
            for phrase in result.get("speech_input", [])
            for alt in phrase.get("alternatives", [])[:1]
        )
        spoken = {"sales": "sales", "support": "support", "one": "sales", "two": "support"}
        words = re.findall(r"[a-z]+", heard)
        picked = next((v for w, v in spoken.items() if w in words), "neither")
    said = f"You chose {picked}." if picked != "neither" else "I did not catch that."
    return {
        "actions": [
            _say(said, "After the beep, leave a short message. Press hash when you are done."),
            {
                "record": {
                    "beep_on_start": True,
                    "milliseconds_max_silence": 3000,
                    "seconds_max_duration": 60,
                    "next_page": {"url": "recorded"},
                    "id": picked,
                }
            },
        ],
        # A response's token defaults to null (Aculab): the number is passed on.
        "token": body.get("token"),
    }


def recorded(body: dict[str, Any]) -> dict[str, Any]:
    result = (body.get("action_result") or {}).get("result") or {}
    actions: list[dict[str, Any]] = []
    seconds = float(result.get("seconds_duration", 0.0))
    if result.get("contains_sound"):
        actions.append(_say(f"Thank you. Your message lasted {seconds:.1f} seconds. Here it is."))
        actions.append({"play": {"play_list": [{"file_to_play": result["filename"]}]}})
    else:
        actions.append(_say("I did not hear a message."))
    entered = body.get("token") or ""
    if entered:
        actions.append(_say(f"Remember, your number was {_spoken_digits(entered)}."))
    actions += [_say("Goodbye.", barge_in=False), {"hang_up": {}}]
    return {"actions": actions}


def error(body: dict[str, Any]) -> dict[str, Any]:
    logger.warning("demo error page: %s", body.get("error_result"))
    return {"actions": [_say("Sorry, something went wrong. Goodbye."), {"hang_up": {}}]}


PAGES = {"start": start, "number": number, "choice": choice, "recorded": recorded, "error": error}


def routes(secret: str) -> web.RouteTableDef:
    """The demo's pages, for an aiohttp application; requests must be signed with ``secret``."""
    table = web.RouteTableDef()

    @table.post(PREFIX + "/{page}")
    async def page(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        if not verify(secret, raw, request.headers.get(HEADER)):
            return web.Response(status=403, text="bad or missing Callhook-Signature")
        name = request.match_info["page"]
        if name == "final":
            return web.Response(status=204)
        handler = PAGES.get(name)
        if handler is None:
            raise web.HTTPNotFound()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.Response(status=400, text="body is not JSON")
        return web.json_response(handler(body))

    return table
