"""``callhook validate`` and ``callhook schema``: an action list (a page response) checked
as a call would take it, every problem printed, and the JSON Schema of one."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

from callhook.config.settings import Settings


def validate(source: str, secret: str | None, settings: Callable[[], Settings]) -> int:
    """Check the action list at ``source`` (a file, ``-`` for standard input, or a page's
    URL, requested as a call's first page is, signed with ``secret``) and print every
    problem; the exit status. ``settings``: the config, read only when needed (its
    page timeout, its recogniser's languages)."""
    if source.startswith(("http://", "https://")):
        if not secret:
            why = "a page's URL needs --secret, the secret the application checks signatures with"
            print(f"callhook validate: {why}", file=sys.stderr)
            return 2
        answer = asyncio.run(_first_page(source, secret, settings().page_timeout))
        if isinstance(answer, str):
            print(answer)
            return 1
        if not answer.strip():
            print("valid (an empty body: no actions, the call is hung up)")
            return 0
        data = answer
    else:
        try:
            data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
        except OSError as exc:
            print(f"{source}: {exc.strerror}", file=sys.stderr)
            return 2
    from callhook.actions.response import InvalidResponse, parse_response

    try:
        parse_response(data)
    except InvalidResponse as exc:
        for problem in exc.problems:
            print(problem)
        return 1
    from callhook.speech import languages

    speech = settings().speech
    remote = speech.engines.get(speech.recogniser)
    # A plug-in with no languages configured says its own once it is made: unknown here.
    unknown = remote is not None and remote.protocol == "plugin" and not remote.languages
    if not unknown:
        spoken = remote.languages if remote is not None else None
        document = json.loads(data)
        for warning in languages.warnings(document, speech.recogniser, speech.model, spoken):
            print(f"warning: {warning}")
    print("valid")
    return 0


async def _first_page(url: str, secret: str, timeout: float) -> bytes | str:
    """What the page at ``url`` answers a call's first page request (POST, signed with
    ``secret``, the instance info of an inbound call ringing); why not, if it does not."""
    from callhook.calls.instanceinfo import page_body, this_call
    from callhook.calls.runner import new_instance_id
    from callhook.edge.pages import HttpPages
    from callhook.ports import CallInfo, PageError

    instance = new_instance_id()
    info = CallInfo(
        call_id=f"validate-{instance[:8]}",
        call_from="sip:validate@127.0.0.1",
        call_to="sip:validate@127.0.0.1",
        call_target="validate",
    )
    body = page_body(instance, None, f"logs/{instance}.log", this_call(info, "inbound", 0.0, ""))
    pages = HttpPages(timeout=timeout)
    try:
        return await pages.fetch(
            url, "POST", json.dumps(body, separators=(",", ":")).encode(), secret
        )
    except PageError as exc:
        return f"{url}: {exc.detail}"
    finally:
        await pages.close()


def schema() -> int:
    """Print the JSON Schema of a page response."""
    from callhook.actions.response import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0
