"""The confidence floor on real calls: SIPp speaks to ``callhook serve`` (one process, and
workers behind Kamailio) with the embedded recogniser and ``[speech] min_confidence``. Words
that are none of the hints are heard with a low confidence: ``get_input`` asks again
with its timeout message, ``run_speech_menu`` with its invalid-input message, and the
caller's next, clear answer is the result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, served, wait_for_request
from tests.e2e.rtpstream import Stream
from tests.e2e.test_speech import spoken

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

#: (The models loaded at start, workers too: loaded at the caller's first words on a busy
#: machine, the unsure answer came 4.9 s after them, while the caller was saying the next
#: word, which "Pardon?" then cut off.)
PRELOAD = "[speech]\npreload = true\n"
CONFIG = f"{PRELOAD}min_confidence = 0.5\n"
PARDON = {"play_list": [{"text_to_say": "Pardon?"}]}


def say(text: str) -> dict[str, Any]:
    return {"play_list": [{"text_to_say": text}]}


async def run(
    tmp_path: Path, app: AppServer, workers: int, config: str = CONFIG, name: str = ""
) -> str:
    """The caller says words that are no option, then one that is; the call's log
    (``name``: an application of ``config`` is called, else the default one)."""
    app.page("/final", None)
    stream = (
        Stream(17.0)
        .speech(spoken("Tomorrow afternoon."), at=4.0)
        .speech(spoken("Support."), at=11.0)
    )
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite(name or "ivr"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=60000))
    async with served(tmp_path, app, workers, config) as server:
        call = await sipp.call(server.sip, tmp_path, *parts)
        await wait_for_request(app, "/final", timeout=30)
    assert call.returncode == 0, call.output + call.errors + server.output
    (body,) = app.bodies("/final")
    logs = tmp_path / "data" / "media" / (name or "default")
    return (logs / str(body["log_filename"])).read_text()


@pytest.mark.parametrize("workers", WORKERS)
async def test_get_input_asks_again_after_an_unsure_answer(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    ask = {
        "get_input": {
            "prompt": {"play": say("Say sales, support or billing.")},
            "next_page": {"url": "/heard"},
            "speech_input_mode": "auto",
            "speech_recognition_options": {
                "word_hints": [{"words": ["sales", "support", "billing"]}]
            },
            "on_input_timeout_messages": [PARDON, PARDON],
        }
    }
    app.page("/start", [ask])
    app.page("/heard", [{"hang_up": {}}])
    log = await run(tmp_path, app, workers)
    assert "speech_unsure" in log, log
    assert "Pardon?" in log, log  # asked again, with the action's own message
    (body,) = app.bodies("/heard")
    (best,) = body["action_result"]["result"]["speech_input"][0]["alternatives"]
    assert best["text"] == "support" and best["confidence"] >= 0.5, best


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_speech_menu_takes_an_unsure_answer_as_invalid(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    menu = {
        "run_speech_menu": {
            # (Barge-in: on a loaded machine the prompt said again after "Pardon?" may still
            # be playing when the caller answers.)
            "prompt": {**say("Say sales, support or billing."), "barge_in_on_speech": True},
            "menu_options": [
                {"words": [word], "next_page": {"url": f"/{word}"}}
                for word in ("sales", "support", "billing")
            ],
            "on_invalid_input_messages": [PARDON, PARDON],
        }
    }
    app.page("/start", [menu])
    for word in ("sales", "support", "billing"):
        app.page(f"/{word}", [{"hang_up": {}}])
    # This time the application's own floor ([apps.NAME] min_confidence; [speech] has none).
    config = f"""{PRELOAD}
[apps.menus]
first_page = "{app.url("/start")}"
secret = "{app.secret}"
final_page = "{app.url("/final")}"
min_confidence = 0.5
"""
    log = await run(tmp_path, app, workers, config, name="menus")
    assert "speech_unsure" in log and "Pardon?" in log, log
    (body,) = app.bodies("/support")
    assert body["action_result"]["result"]["selected_input"] == "support"
    assert not app.bodies("/sales") and not app.bodies("/billing")
