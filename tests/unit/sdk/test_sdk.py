"""callhook.sdk: builders checked by validate's own rules, typed page requests, signatures.

The builders are compared with the wire models (so they cannot drift from what
``validate`` accepts), and an application written with the library runs on a call
against the real call runner over real HTTP (callhook.devtools.harness).
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from callhook import cli, sdk
from callhook.actions.catalogue import ACTION_MODELS
from callhook.actions.response import parse_response
from callhook.actions.schema import GetInput, GetNumber, Play, Record
from callhook.devtools.harness import AppServer, Caller, Received, run_call
from callhook.signature import sign

BUILDERS: dict[str, Callable[..., Any]] = {
    "play": sdk.play,
    "get_number": sdk.get_number,
    "get_input": sdk.get_input,
    "record": sdk.record,
    "run_menu": sdk.run_menu,
    "run_speech_menu": sdk.run_speech_menu,
    "connect": sdk.connect,
    "connect_to_conference": sdk.connect_to_conference,
    "transfer": sdk.transfer,
    "sleep": sdk.sleep,
    "hang_up": sdk.hang_up,
    "redirect": sdk.redirect,
    "clear_input": sdk.clear_input,
    "delete_file": sdk.delete_file,
    "start_transcription": sdk.start_transcription,
    "stop_transcription": sdk.stop_transcription,
}
#: Properties a builder leaves out on purpose (none now).
LEFT_OUT: set[tuple[str, str]] = set()


def test_every_action_has_a_builder_with_exactly_its_properties() -> None:
    assert set(BUILDERS) == set(ACTION_MODELS)
    for name, model in ACTION_MODELS.items():
        params = {
            p.name
            for p in inspect.signature(BUILDERS[name]).parameters.values()
            if p.kind is not inspect.Parameter.VAR_POSITIONAL
        }
        if name == "play":
            params.add("play_list")  # the positional items
        fields = {
            info.alias or f  # (the wire name)
            for f, info in model.model_fields.items()
            if (name, f) not in LEFT_OUT
        }
        assert params == fields, name


def test_built_actions_are_what_validate_accepts_with_the_values_given() -> None:
    body = sdk.response(
        sdk.play("Welcome.", sdk.file("greetings/hello.wav"), barge_in_on_digit=False),
        sdk.get_number("pin", prompt="Enter your PIN.", digit_count=4, help_digit=""),
        sdk.get_input(
            sdk.page("https://example.com/said", "GET"),
            prompt=sdk.play(sdk.say("Sales or support?", tts_voice="espeak:en-us")),
            speech_recognition_options=sdk.speech_options(
                word_hints=["sales", "support"], language="en-GB", max_alternatives=2
            ),
            digit_input_options=sdk.digit_options(digit_count=1, end_digit=""),
            on_input_timeout_messages=["Sorry, I did not hear you."],
        ),
        sdk.record("saved", seconds_max_duration=120, beep_on_start=True, format="alaw"),
        token="t-1",
    )
    parsed = parse_response(json.dumps(body))
    assert parsed.token == "t-1"
    play, number, said, rec = parsed.actions
    assert isinstance(play, Play) and play.barge_in_on_digit is False
    assert isinstance(number, GetNumber)
    assert (number.digit_count, number.help_digit, number.next_page.url) == (4, "", "pin")
    assert number.prompt is not None
    assert number.prompt.play_list[0].text_to_say == "Enter your PIN."  # type: ignore[union-attr]
    assert isinstance(said, GetInput)
    assert said.next_page.method == "GET"
    assert said.recognition.hint_words() == ("sales", "support")
    assert said.recognition.max_alternatives == 2 and said.digits.end_digit == ""
    assert isinstance(rec, Record) and rec.format == "alaw" and rec.seconds_max_duration == 120
    # A nested play action is written in its canonical form (docs/reference.md, "Play
    # action"), and what was not given is left out, for callhook's defaults.
    assert body["actions"][1]["get_number"] == {
        "next_page": {"url": "pin"},
        "prompt": {"play": {"play_list": [{"text_to_say": "Enter your PIN."}]}},
        "digit_count": 4,
        "help_digit": "",
    }


def test_menus_connect_and_transfer() -> None:
    body = sdk.response(
        sdk.run_menu([sdk.menu_option("1", "sales"), sdk.menu_option("2", "support")]),
        sdk.run_speech_menu(
            [sdk.speech_menu_option("sales", words=["sales"], digit="1")], prompt="Say sales."
        ),
        sdk.transfer(
            "sip:desk@example.com",
            fallback_connect=sdk.connect(
                ["sip:a@example.com", "user:alice"],
                hold_media="Please hold.",
                secondary_call=sdk.secondary_call(call_recording=True, final_page="done"),
            ),
        ),
        sdk.sleep(1.5),
        sdk.clear_input(),
        sdk.delete_file("recordings/old.wav"),
        sdk.redirect("elsewhere"),
        sdk.hang_up(),
    )
    names = [next(iter(a)) for a in body["actions"]]
    assert names[:3] == ["run_menu", "run_speech_menu", "transfer"]
    fallback = body["actions"][2]["transfer"]["fallback_connect"]["connect"]
    assert fallback["hold_media"] == {"play": {"play_list": [{"text_to_say": "Please hold."}]}}
    assert fallback["secondary_call"]["final_page"] == {"url": "done"}
    assert len(parse_response(json.dumps(body)).actions) == 8


@pytest.mark.parametrize(
    ("build", "path", "words"),
    [
        (lambda: sdk.get_number("pin", digit_count=0, end_digit=""), "$", "end_digit"),
        (
            lambda: sdk.get_number("pin", digit_count="4"),  # type: ignore[arg-type]
            "$.digit_count",
            "integer",
        ),
        (lambda: sdk.get_number("pin", valid_digits="12x"), "$.valid_digits", "x"),
        (lambda: sdk.sleep(-1), "$.seconds", "0"),
        (lambda: sdk.play(), "$.play_list", "at least 1"),
        (lambda: sdk.record("r", format="mp3"), "$.format", "alaw"),  # type: ignore[arg-type]
        (lambda: sdk.run_menu([sdk.menu_option("*", "x")]), "$", "help_digit"),
        (lambda: sdk.transfer("not a number"), "$.destination", "sip"),
        (
            lambda: sdk.get_input(
                "x", speech_recognition_options=sdk.speech_options(max_alternatives=4)
            ),
            "$.speech_recognition_options.max_alternatives",
            "3",
        ),
    ],
)
def test_an_invalid_action_is_refused_where_it_is_built(build: Any, path: str, words: str) -> None:
    with pytest.raises(sdk.InvalidAction) as caught:
        build()
    problems = caught.value.problems
    assert any(p.path == path and words in p.message for p in problems), problems
    assert path in str(caught.value)


def test_a_transfer_falls_back_only_to_a_connect() -> None:
    with pytest.raises(sdk.InvalidAction, match="fallback_connect"):
        sdk.transfer("sip:a@example.com", fallback_connect=sdk.hang_up())


def test_what_the_builders_emit_passes_callhook_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "page.json"
    page.write_text(json.dumps(sdk.response(sdk.get_number("pin", prompt="PIN?", digit_count=4))))
    assert cli.main(["validate", str(page)]) == 0
    assert "valid" in capsys.readouterr().out


# --- page requests and signatures ----------------------------------------------------------


def test_verify_signature_rejects_tampering_a_wrong_secret_and_age() -> None:
    body = b'{"application_instance_id": "a", "token": null}'
    now = 1_800_000_000
    headers = {"callhook-signature": sign("s3cret", body, timestamp=now)}
    assert sdk.verify_signature(headers, body, "s3cret", now=now + 10)
    assert sdk.verify_signature(
        {"Callhook-Signature": headers["callhook-signature"]}, body, "s3cret", now=now
    )
    assert not sdk.verify_signature(headers, body.replace(b"null", b'"x"'), "s3cret", now=now)
    assert not sdk.verify_signature(headers, body, "wrong", now=now)
    assert not sdk.verify_signature(headers, body, "s3cret", now=now + 301)
    assert sdk.verify_signature(headers, body, "s3cret", max_age=600, now=now + 301)
    assert not sdk.verify_signature({}, body, "s3cret", now=now)
    fresh = {"Callhook-Signature": sign("s3cret", body)}
    assert sdk.verify_signature(fresh, body.decode(), "s3cret")
    assert not sdk.verify_signature(fresh, body, "s3cret", now=time.time() + 400)
    # A forged header with a character hmac cannot compare as text is just not valid.
    for forged in (
        f"t={now},v1=é",
        f"t={now},v1=\udce9",
        f"t={now},v1=\ud800",
        f"t={now},v1={'0' * 63}é",
    ):
        assert not sdk.verify_signature({"Callhook-Signature": forged}, body, "s3cret", now=now)
    assert not sdk.verify_signature(headers, "{\ud800}", "s3cret", now=now)
    # A GET page's instance_info with a byte past UTF-8, as a framework decodes it.
    odd = b'{"x": "\xff"}'
    signed = {"Callhook-Signature": sign("s3cret", odd, timestamp=now)}
    assert sdk.verify_signature(signed, odd.decode("utf-8", "surrogateescape"), "s3cret", now=now)


def test_parse_request_keeps_what_it_does_not_know() -> None:
    request = sdk.parse_request(
        {
            "application_instance_id": "i",
            "token": None,
            "this_call": {"call_id": "c", "call_state": "answered", "new_field": 1},
            "action_result": {"action": "future_action", "result": {"x": 1}},
        }
    )
    assert request.this_call is not None and request.this_call.model_extra == {"new_field": 1}
    assert request.result() == {"x": 1}
    assert sdk.parse_request('{"application_instance_id": "i"}').result() is None
    with pytest.raises(ValueError):
        sdk.parse_request("{}")


async def test_an_application_written_with_the_library_runs_on_a_call() -> None:
    seen: list[Any] = []

    def checked(request: Received) -> sdk.PageRequest:
        assert sdk.verify_signature(request.headers, request.raw, app.secret)
        parsed = sdk.parse_request(request.raw)
        seen.append(parsed.result())
        return parsed

    def start(request: Received) -> dict[str, Any]:
        checked(request)
        return sdk.response(
            sdk.get_number("/pin", prompt="Enter your PIN.", digit_count=4), token="one"
        )

    def pin(request: Received) -> dict[str, Any]:
        parsed = checked(request)
        assert parsed.token == "one"
        return sdk.response(
            sdk.get_input(
                "/said",
                prompt="Sales or support?",
                speech_recognition_options=sdk.speech_options(word_hints=["sales", "support"]),
            )
        )

    def said(request: Received) -> dict[str, Any]:
        checked(request)
        return sdk.response(sdk.record("/saved", seconds_max_duration=5))

    def saved(request: Received) -> dict[str, Any]:
        checked(request)
        return sdk.response(sdk.hang_up())

    async with AppServer() as app:
        for path, handler in [("/start", start), ("/pin", pin), ("/said", said), ("/saved", saved)]:
            app.page(path, handler)
        caller = Caller().press("1234", at=2.0).say("support", at=6.0).noise(at=9.0, seconds=1)
        await run_call(app, caller.hang_up(at=30))
    first, number, speech, recording = seen
    assert first is None
    assert isinstance(number, sdk.GetNumberResult) and number.entered_number == "1234"
    assert isinstance(speech, sdk.GetInputResult) and speech.input_type == "speech"
    assert speech.text == "support" and (speech.speech_input[0].alternatives[0].confidence or 0) > 0
    assert isinstance(recording, sdk.RecordResult)
    assert recording.filename.startswith("recordings/") and recording.seconds_duration > 0


def test_the_snippet_in_the_docs_runs() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "applications.md").read_text()
    section = docs.split("## The Python library (`callhook.sdk`)", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    space: dict[str, Any] = {"SECRET": "s3cret"}
    exec(compile(code, "docs/applications.md", "exec"), space)
    body = b'{"application_instance_id": "i", "token": null}'
    assert space["start"]({}, body) == (403, None)
    status, answer = space["start"]({"Callhook-Signature": sign("s3cret", body)}, body)
    assert status == 200 and parse_response(json.dumps(answer)).actions[0].digit_count == 4
    result = {"action": "get_number", "result": {"entered_number": "1234"}}
    request = json.dumps({"application_instance_id": "i", "action_result": result})
    status, answer = space["pin"]({}, request.encode())
    said = answer["actions"][0]["play"]["play_list"][0]["text_to_say"]
    assert said == "You entered 1 2 3 4."


def test_a_transfer_result_as_the_machine_makes_it_parses() -> None:
    """The result of a refused REFER that fell back to a connect, as the transfer machine
    makes it (statuses are strings, "" when none came), read by the library."""
    from callhook.actions.connectschema import Transfer
    from callhook.actions.machine import ActionContext, Completed
    from callhook.actions.transfer import TransferMachine
    from callhook.events import CalleeAnswered, CalleeEnded, ReferAnswered

    action = Transfer.model_validate(
        {
            "destination": "sip:bob@example.com",
            "fallback_connect": {"connect": {"destinations": ["sip:bob@example.com"]}},
            "next_page": {"url": "/after"},
        }
    )
    machine = TransferMachine(action, ActionContext())
    machine.start(0.0)
    machine.handle(ReferAnswered(405), 0.1)
    machine.handle(CalleeAnswered(0, {"call_id": "far"}), 1.0)
    machine.handle(CalleeEnded(0, "hung_up", "BYE"), 4.0)
    assert isinstance(machine.outcome, Completed)
    body = {"application_instance_id": "i", "action_result": machine.outcome.action_result()}
    got = sdk.parse_request(body).result()
    assert isinstance(got, sdk.TransferResult)
    assert (got.transferred, got.refer_status, got.notify_status, got.fell_back) == (
        False,
        "405",
        "",
        True,
    )
    assert isinstance(got.connect_result, sdk.ConnectResult)
    assert got.connect_result.connected and got.connect_result.seconds_connected_duration == 3


def test_a_transcription_result_is_read_as_the_machine_sends_it() -> None:
    from callhook.events import Alternative
    from callhook.media.transcriber import phrase, result_body

    body = result_body(
        "inst-1",
        "logs/x.log",
        "t-7",
        [
            phrase([Alternative("hello there", 0.0)], final=False, direction="outbound",
                   stability_value=0.5),
            phrase([Alternative("hello there friend", 0.87)], final=True, direction=None),
        ],
        completed=False,
    )  # fmt: skip
    request = sdk.parse_request(json.dumps(body))
    result = request.result()
    assert isinstance(result, sdk.TranscriptionResult)
    assert result.id == "t-7" and result.completed is False and request.token == ""
    interim, final = result.transcription
    assert (interim.final, interim.stability, interim.direction) == (False, 0.5, "outbound")
    assert interim.alternatives[0].confidence is None  # interim results carry none
    assert (final.final, final.direction, final.text) == (True, None, "hello there friend")
    assert final.alternatives[0].confidence == 0.87


def test_a_conference_is_built_with_its_participant() -> None:
    built = sdk.connect_to_conference(
        "weekly",
        conference_participant=sdk.conference_participant(
            talker=False, exit_digit="#", name="Alice", has_joined_message="has joined"
        ),
        next_page="/left",
    )
    parsed = parse_response(json.dumps({"actions": [built.to_json()]}))
    (action,) = parsed.actions
    assert action.room == "weekly"
    participant = action.participant()
    assert participant.talker is False and participant.exit_digit == "#"
    with pytest.raises(sdk.InvalidAction, match="exit_digit"):
        both = sdk.conference_participant(exit_digit="1", mute_digit="1")
        sdk.connect_to_conference("weekly", conference_participant=both)
