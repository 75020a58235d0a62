"""The connect action's machine (callhook/actions/connect.py) on a virtual clock, and its
wire model: far legs called at once, the first to answer bridged, the rest dropped; the
hold media or ringback looped meanwhile; every way it ends and the result it gives."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from callhook.actions.connect import RINGBACK, ConnectMachine
from callhook.actions.connectschema import Connect
from callhook.actions.machine import ActionContext, Completed, Continue
from callhook.events import (
    CallCallee,
    CalleeAnswered,
    CalleeEnded,
    CalleeReady,
    CalleeRinging,
    DropCallee,
    JoinCallee,
    PromptFinished,
    RecordCall,
    RunCallee,
    SayText,
    SecondaryPages,
    StartPrompt,
    StopPrompt,
    StopRecording,
)

T0 = 100.0
PAGE = {"url": "/connected"}


def machine(**props: Any) -> ConnectMachine:
    action = Connect.model_validate({"destinations": ["sip:a@x", "sip:b@y"], **props})
    return ConnectMachine(action, ActionContext())


def test_every_destination_is_called_at_once_with_ringback_meanwhile() -> None:
    m = machine(next_page=PAGE, call_from="+441234")
    commands = m.start(T0)
    assert commands[:2] == [
        CallCallee(0, "sip:a@x", "+441234"),
        CallCallee(1, "sip:b@y", "+441234"),
    ]
    (prompt,) = commands[2:]
    assert isinstance(prompt, StartPrompt) and prompt.items == RINGBACK
    assert m.deadline == T0 + 30  # seconds_answer_timeout's default
    # Ringback goes on until an answer: each time it ends it starts again.
    again = m.handle(PromptFinished(prompt.prompt_id), T0 + 6)
    assert len(again) == 1 and isinstance(again[0], StartPrompt)
    assert again[0].items == RINGBACK and again[0].prompt_id != prompt.prompt_id


def test_hold_media_is_looped_instead_of_ringback() -> None:
    m = machine(hold_media={"play": {"play_list": [{"text_to_say": "please hold"}]}})
    (prompt,) = m.start(T0)[2:]
    assert isinstance(prompt, StartPrompt)
    assert prompt.items == (SayText("please hold"),)


def test_hold_media_that_cannot_be_played_falls_back_to_ringback_once() -> None:
    """A hold_media file missing from the store is not tried again every tick: the caller
    hears ringback, looped as usual, for the rest of the connect."""
    m = machine(hold_media={"play": {"play_list": [{"file_to_play": "missing.wav"}]}})
    (prompt,) = m.start(T0)[2:]
    assert isinstance(prompt, StartPrompt) and prompt.items != RINGBACK
    (fallback,) = m.handle(PromptFinished(prompt.prompt_id, "no such file"), T0 + 0.02)
    assert isinstance(fallback, StartPrompt) and fallback.items == RINGBACK
    (again,) = m.handle(PromptFinished(fallback.prompt_id), T0 + 6.02)
    assert isinstance(again, StartPrompt) and again.items == RINGBACK
    assert m.handle(PromptFinished(999, "another prompt's error"), T0 + 7) == []


def test_the_first_to_answer_is_bridged_and_the_other_dropped() -> None:
    m = machine(next_page=PAGE)
    prompt = m.start(T0)[2]
    assert isinstance(prompt, StartPrompt)
    assert m.handle(CalleeRinging(0), T0 + 1) == []
    commands = m.handle(CalleeAnswered(1, {"call_id": "far-1"}), T0 + 4)
    assert commands == [StopPrompt(prompt.prompt_id), DropCallee(0), JoinCallee(1)]
    assert m.deadline is None and m.outcome is None  # bridged: no answer timeout any more
    assert m.handle(CalleeAnswered(0), T0 + 5) == [DropCallee(0)]  # too late
    assert m.handle(CalleeEnded(0, "no_answer", "487"), T0 + 5) == []  # the dropped one
    assert m.handle(CalleeEnded(1, "hung_up", "BYE"), T0 + 16.5) == []
    assert m.outcome == Completed(
        "connect",
        {
            "connected": True,
            "destination": "sip:b@y",
            "call_cause": "hung_up",
            "call_raw_cause": "BYE",
            "seconds_connected_duration": 12.5,
            "secondary_call": {"call_id": "far-1"},
        },
    )


def test_when_every_far_leg_fails_the_most_telling_cause_is_given() -> None:
    m = machine(next_page=PAGE)
    m.start(T0)
    assert m.handle(CalleeEnded(0, "failed", "503"), T0 + 1) == []
    commands = m.handle(CalleeEnded(1, "busy", "486"), T0 + 2)
    assert len(commands) == 1 and isinstance(commands[0], StopPrompt)
    assert isinstance(m.outcome, Completed)
    assert m.outcome.result == {
        "connected": False,
        "destination": None,
        "call_cause": "busy",
        "call_raw_cause": "486",
        "seconds_connected_duration": 0,
    }


def test_no_answer_within_the_timeout_drops_every_far_leg() -> None:
    m = machine(next_page=PAGE, seconds_answer_timeout=10)
    m.start(T0)
    assert m.deadline == T0 + 10
    commands = m.on_deadline(T0 + 10)
    assert commands[1:] == [DropCallee(0), DropCallee(1)] and isinstance(commands[0], StopPrompt)
    assert isinstance(m.outcome, Completed)
    assert (m.outcome.result["connected"], m.outcome.result["call_cause"]) == (False, "no_answer")
    assert m.handle(CalleeEnded(0, "no_answer", "487"), T0 + 10.1) == []  # nothing more


def test_the_caller_hanging_up_drops_the_far_legs_ringing_or_bridged() -> None:
    ringing = machine()
    ringing.start(T0)
    commands = ringing.stop(T0 + 3, "hangup")
    assert commands[1:] == [DropCallee(0), DropCallee(1)]
    assert isinstance(ringing.outcome, Continue)
    bridged = machine()
    bridged.start(T0)
    bridged.handle(CalleeAnswered(0), T0 + 2)
    assert bridged.stop(T0 + 9, "hangup") == [DropCallee(0)]


def test_without_next_page_the_next_action_runs() -> None:
    m = machine()
    m.start(T0)
    m.handle(CalleeEnded(0, "busy", "486"), T0 + 1)
    m.handle(CalleeEnded(1, "unobtainable", "404"), T0 + 1)
    assert m.outcome == Continue("connect: busy")


def test_the_nulls_aculab_gives_a_meaning() -> None:
    """Aculab's connect page: hold_media null plays ringing, classify_callee null is no
    classification, next_page null runs the next action."""
    m = machine(hold_media=None, classify_callee=None, next_page=None, secondary_call=None)
    (prompt,) = m.start(T0)[2:]
    assert isinstance(prompt, StartPrompt) and prompt.items == RINGBACK
    m.handle(CalleeEnded(0, "busy", "486"), T0 + 1)
    m.handle(CalleeEnded(1, "busy", "486"), T0 + 1)
    assert m.outcome == Continue("connect: busy")


def test_early_media_is_passed_when_asked() -> None:
    action = Connect.model_validate(
        {"destinations": ["sip:a@x"], "pass_early_media": True, "next_page": PAGE}
    )
    m = ConnectMachine(action, ActionContext())
    prompt = m.start(T0)[1]
    assert isinstance(prompt, StartPrompt)
    assert m.handle(CalleeRinging(0, early_media=False), T0 + 1) == []  # a plain 180
    commands = m.handle(CalleeRinging(0, early_media=True), T0 + 2)
    assert commands == [StopPrompt(prompt.prompt_id), JoinCallee(0, early=True)]
    assert m.handle(PromptFinished(prompt.prompt_id), T0 + 3) == []  # no more ringback
    assert m.handle(CalleeAnswered(0), T0 + 4) == [JoinCallee(0)]


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"destinations": []}, "at least 1 item"),
        ({"classify_callee": {"milliseconds_timeout": 400}}, "greater than or equal to 500"),
        ({"classify_callee": {"wait_for_the_beep": True}}, "Extra inputs"),
        (
            {"destinations": ["con:room"], "classify_callee": {}},
            "has no far end to classify",
        ),
        ({"pass_early_media": True}, "pass_early_media needs exactly one destination"),
        (
            {"secondary_call": {"call_recording": True, "call_recording_encryption": True}},
            "call_recording_encryption needs call_recording_cipher, here or in the response",
        ),
        ({"seconds_answer_timeout": 0}, "greater than or equal to 1"),
        ({"secondary_call": {"call_recording_mode": "stereo"}}, "'mixed' or 'separate'"),
        ({"hold_media": {"get_number": {}}}, "play action"),
    ],
)
def test_the_wire_model_refuses_what_cannot_be_done(props: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Connect.model_validate({"destinations": ["sip:a@x", "sip:b@y"], **props})


def test_defaults() -> None:
    action = Connect.model_validate({"destinations": ["+441234567890"]})
    assert (action.seconds_answer_timeout, action.pass_early_media) == (30, False)
    assert action.hold_media is None and action.next_page is None
    assert action.secondary_call is None and action.call_from is None


def test_ringback_is_440_and_480_hz_then_silence() -> None:
    import numpy as np

    from callhook.events import PlayTone
    from callhook.telephony.prompts import _tone

    on, off = RINGBACK
    assert isinstance(on, PlayTone) and isinstance(off, PlayTone)
    audio = _tone(on)
    assert len(audio) == 16000  # 2 s at 8 kHz
    spectrum = np.abs(np.fft.rfft(audio.astype(np.float64)))
    hz = np.fft.rfftfreq(len(audio), 1 / 8000)
    peaks = sorted(hz[np.argsort(spectrum)[-2:]])
    assert peaks == [440.0, 480.0]
    silence = _tone(off)
    assert len(silence) == 32000 and not silence.any()


def test_the_from_user_of_a_far_leg() -> None:
    from callhook.dialplan.callerid import call_from_user

    assert call_from_user("+441234567890") == "+441234567890"
    assert call_from_user("sip:reception@pbx.example:5060") == "reception"
    assert call_from_user('"Alice" <sip:alice@192.0.2.1>;tag=9') == "alice"
    for unusable in (None, "", "sip:two words@h", "<sip:@h>", "a b"):
        assert call_from_user(unusable) is None


CIPHER = {"type": "aescbc", "key": "00" * 32, "initialisation_vector": "11" * 16}


@pytest.mark.parametrize("mode", ["mixed", "separate"])
def test_call_recording_runs_while_bridged_and_the_result_names_its_file(mode: str) -> None:
    names = iter(["recordings/call-1.wav"])
    action = Connect.model_validate(
        {
            "destinations": ["sip:a@x"],
            "next_page": PAGE,
            "secondary_call": {
                "call_recording": True,
                "call_recording_mode": mode,
                "call_recording_encryption": True,
                "call_recording_cipher": CIPHER,
            },
        }
    )
    m = ConnectMachine(action, ActionContext(new_recording_name=lambda: next(names)))
    m.start(T0)
    commands = m.handle(CalleeAnswered(0, {"call_id": "far-0"}), T0 + 2)
    record = commands[-1]
    assert commands[-2] == JoinCallee(0)  # the recording starts with the bridge
    assert isinstance(record, RecordCall)
    assert (record.filename, record.mode) == ("recordings/call-1.wav", mode)
    assert record.cipher == ("aescbc", "00" * 32, "11" * 16)
    assert m.handle(CalleeEnded(0, "hung_up", "BYE"), T0 + 9) == [
        StopRecording("recordings/call-1.wav")
    ]
    assert isinstance(m.outcome, Completed)
    assert m.outcome.result["call_recording_filename"] == "recordings/call-1.wav"


def test_call_recording_without_encryption_ignores_a_cipher_and_stops_on_hang_up() -> None:
    action = Connect.model_validate(
        {
            "destinations": ["sip:a@x"],
            "secondary_call": {"call_recording": True, "call_recording_cipher": CIPHER},
        }
    )
    m = ConnectMachine(action, ActionContext(new_recording_name=lambda: "r.wav"))
    m.start(T0)
    (record,) = [c for c in m.handle(CalleeAnswered(0), T0 + 1) if isinstance(c, RecordCall)]
    assert record.cipher is None and record.mode == "mixed"
    assert StopRecording("r.wav") in m.stop(T0 + 5, "hangup")


def test_no_call_recording_unless_asked_and_none_before_the_answer() -> None:
    m = machine(next_page=PAGE)
    started = m.start(T0)
    assert not any(isinstance(c, RecordCall) for c in started)
    answered = m.handle(CalleeAnswered(0), T0 + 1)
    assert not any(isinstance(c, RecordCall) for c in answered)
    m.handle(CalleeEnded(0, "hung_up", "BYE"), T0 + 3)
    assert isinstance(m.outcome, Completed)
    assert "call_recording_filename" not in m.outcome.result


def screening_machine(**second: Any) -> ConnectMachine:
    action = Connect.model_validate(
        {
            "destinations": ["sip:a@x", "sip:b@y"],
            "next_page": PAGE,
            "secondary_call": {"first_page": {"url": "whisper"}, **second},
        }
    )
    return ConnectMachine(action, ActionContext(page_url="http://app.example/ivr/start"))


def test_with_a_first_page_the_answered_leg_runs_it_before_it_is_joined() -> None:
    m = screening_machine(final_page={"url": "/over", "method": "GET"})
    hold = m.start(T0)[2]
    assert isinstance(hold, StartPrompt)
    commands = m.handle(CalleeAnswered(1, {"call_id": "far-1"}), T0 + 3)
    assert commands == [
        DropCallee(0),
        RunCallee(
            1,
            SecondaryPages(
                first_page=("http://app.example/ivr/whisper", "POST"),
                final_page=("http://app.example/over", "GET"),
                max_seconds=240 * 60,
            ),
        ),
    ]
    # Not joined yet: the caller still hears ringback, looped, and no answer timeout runs.
    assert m.deadline is None and m.outcome is None
    again = m.handle(PromptFinished(hold.prompt_id), T0 + 6)
    assert len(again) == 1 and isinstance(again[0], StartPrompt)
    assert m.handle(CalleeReady(0), T0 + 7) == []  # not the one screened
    joined = m.handle(CalleeReady(1), T0 + 8)
    assert joined == [StopPrompt(again[0].prompt_id), JoinCallee(1)]
    m.handle(CalleeEnded(1, "hung_up", "BYE"), T0 + 20)
    assert isinstance(m.outcome, Completed)
    assert m.outcome.result["connected"] is True
    assert m.outcome.result["seconds_connected_duration"] == 12  # from the join


def test_the_recording_cipher_may_come_from_the_first_pages_response() -> None:
    """Aculab's own secondary_call example: call_recording_encryption true and no cipher in
    the action; the far leg's first page's response gives it (call_recording_cipher)."""
    names = iter(["recordings/call-2.wav"])
    action = Connect.model_validate(
        {
            "destinations": ["sip:a@x"],
            "secondary_call": {
                "call_recording": True,
                "call_recording_encryption": True,
                "minutes_max_call_duration": 30,
                "first_page": {"url": "my_secondary_call_first_page"},
                "final_page": {"url": "my_secondary_call_final_page"},
            },
        }
    )
    m = ConnectMachine(action, ActionContext(new_recording_name=lambda: next(names)))
    m.start(T0)
    (run,) = m.handle(CalleeAnswered(0, {"call_id": "far-0"}), T0 + 2)
    assert isinstance(run, RunCallee) and run.pages.needs_cipher
    cipher = ("aescbc", "22" * 16, "33" * 16)
    *_, record = m.handle(CalleeReady(0, cipher), T0 + 5)
    assert isinstance(record, RecordCall) and record.cipher == cipher


def test_a_cipher_in_the_action_wins_and_the_first_page_need_not_give_one() -> None:
    m = screening_machine(
        call_recording=True, call_recording_encryption=True, call_recording_cipher=CIPHER
    )
    m.start(T0)
    (_, run) = m.handle(CalleeAnswered(0, {"call_id": "far-0"}), T0 + 2)
    assert isinstance(run, RunCallee) and not run.pages.needs_cipher
    *_, record = m.handle(CalleeReady(0, ("aescbc", "22" * 16, "33" * 16)), T0 + 5)
    assert isinstance(record, RecordCall)
    assert record.cipher == ("aescbc", "00" * 32, "11" * 16)


def test_a_far_leg_that_ends_while_screened_is_not_connected() -> None:
    m = screening_machine()
    hold = m.start(T0)[2]
    assert isinstance(hold, StartPrompt)
    m.handle(CalleeAnswered(0, {"call_id": "far-0"}), T0 + 2)
    # Its first page's actions hung it up (the person declined the call).
    assert m.handle(CalleeEnded(0, "completed", "200"), T0 + 5) == [StopPrompt(hold.prompt_id)]
    assert isinstance(m.outcome, Completed)
    result = m.outcome.result
    assert (result["connected"], result["destination"]) == (False, None)
    assert (result["call_cause"], result["call_raw_cause"]) == ("completed", "200")


def test_secondary_call_without_pages_still_gives_its_duration_limit() -> None:
    action = Connect.model_validate(
        {"destinations": ["sip:a@x"], "secondary_call": {"minutes_max_call_duration": 2}}
    )
    m = ConnectMachine(action, ActionContext())
    m.start(T0)
    commands = m.handle(CalleeAnswered(0), T0 + 1)
    assert RunCallee(0, SecondaryPages(max_seconds=120.0)) in commands
    assert JoinCallee(0) in commands  # no first page: joined at once
