"""An application with one small call per action, written with ``callhook.sdk``.

Each ``/<action>/start`` page starts a call that uses that action and reports its result
(spoken back to the caller), so ``examples/flows/<action>.yaml`` can call it with
``callhook test``::

    python examples/actions_app.py --port 5000 --secret s3cret &
    APP_PORT=5000 callhook test examples/flows/*.yaml

Every request's signature is checked (a forged one gets 403).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from callhook import sdk

Page = Callable[[sdk.PageRequest], dict[str, Any]]

#: Where ``/agent/start`` connects the caller (examples/voice_agent.py's default).
AGENT_URL = os.environ.get("AGENT_URL", "ws://127.0.0.1:8765/agent")


def _said(result: Any) -> str:
    if isinstance(result, sdk.GetNumberResult):
        return f"You entered {' '.join(result.entered_number) or 'nothing'}."
    if isinstance(result, sdk.GetInputResult):
        return (
            f"You said {result.text}."
            if result.input_type == "speech"
            else (f"You pressed {' '.join(result.digits_input)}.")
        )
    if isinstance(result, sdk.RecordResult):
        return f"Your message lasted {result.seconds_duration:.0f} seconds."
    if isinstance(result, sdk.RunMenuResult):
        return f"You chose option {result.selected_digit}."
    if isinstance(result, sdk.RunSpeechMenuResult):
        return f"You chose {result.selected_input}."
    if isinstance(result, sdk.TransferResult):
        if result.transferred:
            return "You were transferred."
        if result.fell_back and result.connect_result is not None:
            return f"Your phone refused the transfer. {_said(result.connect_result)}"
        return f"The transfer failed with status {result.refer_status or 'none'}."
    if isinstance(result, sdk.ConnectResult):
        if result.connected:
            return f"You were connected for {result.seconds_connected_duration:.0f} seconds."
        return f"Nobody answered: {result.call_cause}."
    return "Done."


def callee(request: sdk.PageRequest) -> str:
    """Where ``connect`` and ``transfer`` send the caller: the ``callee`` application
    (examples/serve.toml) on the serve this call came through, whose address the call's
    own ``call_to`` (``sip:connect@HOST:PORT``) gives."""
    call_to = request.this_call.call_to if request.this_call else ""
    host = call_to.split("@", 1)[-1].split(";", 1)[0].rstrip(">") or "127.0.0.1"
    return f"sip:callee@{host}"


def done(request: sdk.PageRequest) -> dict[str, Any]:
    """Every action's next page: say what happened, then hang up."""
    return sdk.response(sdk.play(_said(request.result())), sdk.hang_up())


PAGES: dict[str, Page] = {
    "play/start": lambda r: sdk.response(
        sdk.play("Hello from the play action.", sdk.digits("1")), sdk.hang_up()
    ),
    "get_number/start": lambda r: sdk.response(
        sdk.get_number("../done", prompt="Enter your four digit PIN.", digit_count=4)
    ),
    "get_input/start": lambda r: sdk.response(
        sdk.get_input(
            "../done",
            prompt="Say sales or support, or press 1 or 2.",
            speech_recognition_options=sdk.speech_options(word_hints=["sales", "support"]),
            digit_input_options=sdk.digit_options(digit_count=1, valid_digits="12"),
        )
    ),
    "record/start": lambda r: sdk.response(
        sdk.record("../done", beep_on_start=True, seconds_max_duration=30),
    ),
    "run_menu/start": lambda r: sdk.response(
        sdk.run_menu(
            [sdk.menu_option("1", "../done"), sdk.menu_option("2", "../done")],
            prompt="For sales press 1, for support press 2.",
        )
    ),
    "run_speech_menu/start": lambda r: sdk.response(
        sdk.run_speech_menu(
            [
                sdk.speech_menu_option("../done", words=["billing"], digit="1"),
                sdk.speech_menu_option("../done", words=["orders"], digit="2"),
            ],
            prompt="Say billing or orders.",
        )
    ),
    "sleep/start": lambda r: sdk.response(
        sdk.play("Wait for it."), sdk.sleep(2), sdk.play("There it is."), sdk.hang_up()
    ),
    "redirect/start": lambda r: sdk.response(sdk.redirect("elsewhere"), sdk.play("Never said.")),
    "redirect/elsewhere": lambda r: sdk.response(sdk.play("Redirected."), sdk.hang_up()),
    "clear_input/start": lambda r: sdk.response(
        sdk.play("Press a key while I speak: it will be forgotten."),
        sdk.clear_input(),
        sdk.get_number("../done", prompt="Now enter one digit.", digit_count=1),
    ),
    "delete_file/start": lambda r: sdk.response(
        sdk.record("recorded", seconds_max_duration=5, milliseconds_max_silence=1000)
    ),
    "delete_file/recorded": lambda r: sdk.response(
        sdk.delete_file(r.result().filename), sdk.play("Your message is deleted."), sdk.hang_up()
    ),
    "connect/start": lambda r: sdk.response(
        sdk.play("Putting you through."),
        sdk.connect(callee(r), seconds_answer_timeout=20, next_page="../done"),
    ),
    # callhook test's caller refuses a REFER (as many phones do): the connect runs instead.
    "transfer/start": lambda r: sdk.response(
        sdk.transfer(callee(r), fallback_connect=sdk.connect(callee(r)), next_page="../done")
    ),
    # Live transcription: every phrase the caller says goes to /transcript as it is heard.
    "transcription/start": lambda r: sdk.response(
        sdk.start_transcription("../transcript", transcription_mode="inbound"),
        sdk.play("Talk to me. Everything you say is written down."),
        sdk.sleep(10),
        sdk.stop_transcription(),
        sdk.play("Thank you."),
        sdk.hang_up(),
    ),
    # A voice agent on a WebSocket (examples/voice_agent.py): the caller talks with it.
    "agent/start": lambda r: sdk.response(
        sdk.play("Connecting you to the agent."),
        sdk.connect(AGENT_URL, next_page="../done"),
    ),
    # The far end of both: answers, speaks, hangs up.
    "callee/start": lambda r: sdk.response(sdk.play("Hello, this is the callee."), sdk.hang_up()),
    "hang_up/start": lambda r: sdk.response(sdk.play("Goodbye."), sdk.hang_up()),
    "done": done,
}


def application(secret: str) -> web.Application:
    """The aiohttp application: every page of :data:`PAGES`, under ``/``, and ``/final``."""

    def handler(page: Page) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            if not sdk.verify_signature(request.headers, body, secret):
                return web.Response(status=403, text="bad signature")
            return web.json_response(page(sdk.parse_request(body)))

        return handle

    async def final(request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def transcript(request: web.Request) -> web.Response:
        """``start_transcription``'s results page: outside the call's flow, answered 204."""
        body = await request.read()
        if not sdk.verify_signature(request.headers, body, secret):
            return web.Response(status=403, text="bad signature")
        result = sdk.parse_request(body).result()
        assert isinstance(result, sdk.TranscriptionResult)
        for phrase in result.transcription:
            if phrase.final:
                print(f"transcript {result.id!r} ({phrase.direction}): {phrase.text}", flush=True)
        if result.completed:
            print(f"transcript {result.id!r}: completed", flush=True)
        return web.Response(status=204)

    app = web.Application()
    for path, page in PAGES.items():
        app.router.add_post(f"/{path}", handler(page))
    app.router.add_post("/final", final)
    app.router.add_post("/transcription/transcript", transcript)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--secret", default="s3cret")
    args = parser.parse_args()
    web.run_app(application(args.secret), host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
