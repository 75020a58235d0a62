"""The IVR of the load kit (../shared/bench/README.md) as a callhook application.

    play a 3.0 s prompt; beep; get 4 digits (5 s); record until 3 s of silence
    (10 s at most); hang up.

Run it on its own (``python -m bench.ivr_app --port 8090``) so that its CPU is
not counted as callhook's, or import :func:`page` to answer in memory.
The prompt and beep are files of the application's namespace in the media
file store: ``ivr/prompt.wav`` (3.0 s) and ``ivr/beep.wav`` (0.25 s).

It also answers the bridged variant of :mod:`bench.connect_load` under
``/connect/PORT/``: ``start`` puts the caller through to
``sip:callee@127.0.0.1:PORT``; ``after`` (the connect's ``next_page``) hangs up; and
:mod:`bench.websocket_load`'s under ``/websocket/PORT/``, the same with
``ws://127.0.0.1:PORT/echo``; and :mod:`bench.conference_load`'s under ``/conference/``:
``start`` puts the caller in the conference room named by the user part of the number
it called (``this_call.call_to``: ``sip:room07@...`` joins room ``room07``), with no
entry beep; ``left`` (its ``next_page``, requested only when the room put it out) and
``error`` hang up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from aiohttp import web

PROMPT = "ivr/prompt.wav"
BEEP = "ivr/beep.wav"


def page(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The answer of each page of the IVR."""
    name = url.rstrip("/").rsplit("/", 1)[-1]
    if name == "start":
        actions: list[dict[str, Any]] = [
            {"play": {"play_list": [{"file_to_play": PROMPT}], "barge_in_on_digit": False}},
            {
                "get_number": {
                    "prompt": {"play": {"play_list": [{"file_to_play": BEEP}]}},
                    "digit_count": 4,
                    "end_digit": "",
                    "seconds_timeout": 10,
                    "milliseconds_initial_timeout": 5000,
                    "next_page": {"url": "digits"},
                }
            },
            {"hang_up": {}},
        ]
    elif name == "digits":
        actions = [
            {
                "record": {
                    "milliseconds_max_silence": 3000,
                    "seconds_max_duration": 10,
                    "barge_in_digits": "",
                    "next_page": {"url": "recorded"},
                }
            }
        ]
    else:  # recorded, error
        actions = [{"hang_up": {}}]
    return {"actions": actions}


def connect_page(port: int, name: str, kind: str = "connect") -> dict[str, Any]:
    """The answer of each page of the bridged variant: connect to the callee on ``port``
    of this host (``kind`` ``websocket``: the WebSocket server there, ``ws://``), then
    (``after``, ``error``) hang up."""
    if name == "start":
        destination = (
            f"ws://127.0.0.1:{port}/echo" if kind == "websocket" else f"sip:callee@127.0.0.1:{port}"
        )
        return {
            "actions": [{"connect": {"destinations": [destination], "next_page": {"url": "after"}}}]
        }
    return {"actions": [{"hang_up": {}}]}


def conference_page(name: str, call_to: str) -> dict[str, Any]:
    """The answer of each page of the conference variant: into the room the called user
    names (``start``), then (``left``, ``error``) hang up."""
    if name == "start":
        return {
            "actions": [
                {
                    "connect_to_conference": {
                        "name": room_of(call_to),
                        "conference_participant": {"beep_on_entry": False},
                        "next_page": {"url": "left"},
                    }
                }
            ]
        }
    return {"actions": [{"hang_up": {}}]}


def room_of(call_to: str) -> str:
    """The room a call is for: the user part of the URI it called (``sip:room07@host``)."""
    user = call_to.split(":", 1)[-1].split("@", 1)[0]
    return "".join(c for c in user if c.isalnum() or c in "_-") or "room"


def application() -> web.Application:
    stats: dict[str, Any] = {
        "calls": 0,
        "digits": {},
        "recordings": [],
        "final": {},
        "connects": [],
        "errors": 0,
        "rooms": {},
        "left": [],
    }

    async def handle(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        result = (body.get("action_result") or {}).get("result") or {}
        if request.path.endswith("/start"):
            stats["calls"] += 1
        elif request.path.endswith("/digits"):
            number = str(result.get("entered_number"))
            stats["digits"][number] = stats["digits"].get(number, 0) + 1
        elif request.path.endswith("/recorded"):
            stats["recordings"].append(
                [result.get("seconds_duration"), result.get("reason"), result.get("contains_sound")]
            )
        elif request.path.endswith("/final"):
            cause = body["this_call"].get("call_cause")
            stats["final"][cause] = stats["final"].get(cause, 0) + 1
            return web.Response(status=204)
        return web.json_response(page(str(request.url), body))

    async def connect(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        name = request.match_info["page"]
        if name == "final":
            cause = body["this_call"].get("call_cause")
            stats["final"][cause] = stats["final"].get(cause, 0) + 1
            return web.Response(status=204)
        if name == "start":
            stats["calls"] += 1
        elif name == "error":
            stats["errors"] += 1
        elif name == "after":
            result = (body.get("action_result") or {}).get("result") or {}
            stats["connects"].append(
                [
                    result.get("connected"),
                    result.get("call_cause"),
                    result.get("seconds_connected_duration"),
                ]
            )
        kind = request.path.strip("/").split("/", 1)[0]
        return web.json_response(connect_page(int(request.match_info["port"]), name, kind))

    async def conference(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        name = request.match_info["page"]
        call_to = str(body.get("this_call", {}).get("call_to", ""))
        if name == "final":
            cause = body["this_call"].get("call_cause")
            stats["final"][cause] = stats["final"].get(cause, 0) + 1
            return web.Response(status=204)
        if name == "start":
            stats["calls"] += 1
            room = room_of(call_to)
            stats["rooms"][room] = stats["rooms"].get(room, 0) + 1
        elif name == "error":
            stats["errors"] += 1
        elif name == "left":
            result = (body.get("action_result") or {}).get("result") or {}
            stats["left"].append([room_of(call_to), result.get("seconds_connected_duration")])
        return web.json_response(conference_page(name, call_to))

    async def show(request: web.Request) -> web.Response:
        return web.json_response(stats)

    async def reset(request: web.Request) -> web.Response:
        stats.update(
            calls=0, digits={}, recordings=[], final={}, connects=[], errors=0, rooms={}, left=[]
        )
        return web.Response(status=204)

    async def chain(request: web.Request) -> web.Response:
        # One get_number per page, each completing on one digit: the runner's
        # page-to-action overhead, action after action.
        await request.read()
        step = {"get_number": {"digit_count": 1, "end_digit": "", "next_page": {"url": "chain"}}}
        return web.json_response({"actions": [step]})

    app = web.Application()
    app.router.add_get("/stats", show)
    app.router.add_post("/stats/reset", reset)
    app.router.add_post("/ivr/{page}", handle)
    app.router.add_post("/chain/{page}", chain)
    app.router.add_post("/connect/{port}/{page}", connect)
    app.router.add_post("/websocket/{port}/{page}", connect)
    app.router.add_post("/conference/{page}", conference)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args()

    async def serve() -> None:
        runner = web.AppRunner(application(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, args.host, args.port).start()
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
