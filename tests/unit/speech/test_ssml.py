"""SSML in ``text_to_say`` (callhook/speech/ssml.py, sayas.py): each element rendered into
what the voices say, malformed SSML refused with its place, and the action list's error
with its JSON path."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from callhook.actions.response import InvalidResponse, parse_response
from callhook.speech import sayas, ssml
from callhook.speech.ssml import Pause, Spoken, StoreAudio
from callhook.speech.synthesis import Synthesiser
from callhook.speech.tts import PEAK_CEILING_DBFS, at_volume


def parts(body: str, language: str | None = None) -> tuple[ssml.Part, ...]:
    return ssml.parts(f"<speak>{body}</speak>", language)


def test_plain_text_is_its_sentences_markup_and_all() -> None:
    assert not ssml.is_ssml("Press 1 if x < 2. <b>Thanks</b>")
    assert ssml.parts("Press 1 if x < 2. <b>Thanks</b>") == (
        Spoken("Press 1 if x < 2."),
        Spoken("<b>Thanks</b>"),
    )
    for text in ("<speak>Hi</speak>", "  \n<speak xml:lang='en-GB'>Hi</speak>", "<speak/>"):
        assert ssml.is_ssml(text)
    assert ssml.is_ssml('<?xml version="1.0"?><speak>Hi</speak>')
    assert not ssml.is_ssml("<speaker>Hi</speaker>")


def test_speak_alone_is_its_words_white_space_folded() -> None:
    assert parts("  Hello\n   there.   How are you?  ") == (
        Spoken("Hello there."),
        Spoken("How are you?"),
    )
    assert parts("") == ()
    assert ssml.parts("<speak/>") == ()


@pytest.mark.parametrize(
    ("attributes", "seconds"),
    [
        ('time="500ms"', 0.5),
        ('time="2s"', 2.0),
        ('time="1.5s"', 1.5),
        ('time="10s"', 10.0),
        ('strength="x-strong"', 0.8),
        ('strength="strong"', 0.5),
        ('strength="weak"', 0.25),
        ("", 0.25),  # Polly's default: medium, a comma's pause
    ],
)
def test_break_is_a_pause(attributes: str, seconds: float) -> None:
    assert parts(f"One <break {attributes}/> two") == (Spoken("One"), Pause(seconds), Spoken("two"))


def test_break_strength_none_is_no_pause_and_pauses_in_a_row_add_up() -> None:
    assert parts('One <break strength="none"/> two') == (Spoken("One"), Spoken("two"))
    assert parts('One <break time="1s"/><break time="250ms"/> two')[1] == Pause(1.25)


def test_prosody_sets_rate_and_volume_nested_and_a_change_starts_a_piece() -> None:
    said = parts(
        'Normal <prosody rate="slow">slow <prosody rate="50%" volume="+6dB">slower and'
        ' louder</prosody></prosody> <prosody volume="x-soft" pitch="high">quiet</prosody>'
    )
    assert said == (
        Spoken("Normal"),
        Spoken("slow", 0.8),
        Spoken("slower and louder", 0.4, 6.0),
        Spoken("quiet", 1.0, -12.0),
    )
    assert parts('<prosody rate="200%" volume="silent">x</prosody>') == (
        Spoken("x", 2.0, -math.inf),
    )


def test_emphasis_is_slower_and_louder_or_reduced() -> None:
    assert parts("<emphasis>now</emphasis>") == (Spoken("now", 0.92, 2.0),)
    assert parts('<emphasis level="strong">now</emphasis>') == (Spoken("now", 0.85, 4.0),)
    assert parts('<emphasis level="reduced">now</emphasis>') == (Spoken("now", 1.1, -4.0),)


@pytest.mark.parametrize(
    ("element", "said"),
    [
        ('<say-as interpret-as="digits">4172</say-as>', "four one seven two"),
        ('<say-as interpret-as="characters">AB12</say-as>', "A B one two"),
        ('<say-as interpret-as="spell-out">ok</say-as>', "O K"),
        (
            '<say-as interpret-as="cardinal">1,234</say-as>',
            "one thousand two hundred and thirty-four",
        ),
        ('<say-as interpret-as="number">7</say-as>', "seven"),
        ('<say-as interpret-as="ordinal">21</say-as>', "twenty-first"),
        ('<say-as interpret-as="ordinal">3rd</say-as>', "third"),
        (
            '<say-as interpret-as="telephone">0161 496 0000</say-as>',
            "zero one six one, four nine six, zero zero zero zero",
        ),
        (
            '<say-as interpret-as="telephone">+1 (555) 010-9999</say-as>',
            "plus one, five five five, zero one zero, nine nine nine nine",
        ),
        (
            '<say-as interpret-as="date" format="mdy">12/25/2026</say-as>',
            "December twenty-fifth, twenty twenty-six",
        ),
        (
            '<say-as interpret-as="date" format="dmy">5.3.2026</say-as>',
            "March fifth, twenty twenty-six",
        ),
        ('<say-as interpret-as="date">2026-03-05</say-as>', "March fifth, twenty twenty-six"),
        (
            '<say-as interpret-as="date" format="yyyymmdd">20260305</say-as>',
            "March fifth, twenty twenty-six",
        ),
        ('<say-as interpret-as="date" format="md">Jan 2</say-as>', "January second"),
        ('<say-as interpret-as="date" format="y">1905</say-as>', "nineteen oh-five"),
        ('<say-as interpret-as="date" format="dmy">31/02/2026</say-as>', "31/02/2026"),
        ('<say-as interpret-as="time">10:30</say-as>', "ten thirty"),
        ('<say-as interpret-as="time">9:05 pm</say-as>', "nine oh five p m"),
        ('<say-as interpret-as="time">14:00</say-as>', "fourteen hundred"),
        ('<say-as interpret-as="time">7 am</say-as>', "seven a m"),
        ('<say-as interpret-as="time">25:00</say-as>', "25:00"),
        ('<say-as interpret-as="currency">$12.50</say-as>', "twelve dollars and fifty cents"),
        ('<say-as interpret-as="currency">£1</say-as>', "one pound"),
        ('<say-as interpret-as="currency">3.01 EUR</say-as>', "three euros and one cent"),
        ('<say-as interpret-as="currency">a lot</say-as>', "a lot"),
        ('<say-as interpret-as="fraction">3/4</say-as>', "3/4"),  # as written
    ],
)
def test_say_as(element: str, said: str) -> None:
    assert parts(element) == (Spoken(said),)


def test_say_as_numbers_in_the_call_s_language() -> None:
    assert parts('<say-as interpret-as="cardinal">21</say-as>', "fr-FR") == (Spoken("vingt et un"),)
    assert parts('<say-as interpret-as="cardinal">21</say-as>', "xx") == (Spoken("twenty-one"),)
    # a date in a language with no date words here: as written (its engine reads it)
    assert sayas.date("05/03/2026", "dmy", "de") == "05/03/2026"
    assert ssml.parts('<speak xml:lang="fr"><say-as interpret-as="ordinal">2</say-as></speak>') == (
        Spoken("deuxième"),
    )


def test_sub_p_s_mark_and_unknown_elements() -> None:
    assert parts('The <sub alias="World Wide Web Consortium">W3C</sub> says') == (
        Spoken("The World Wide Web Consortium says"),
    )
    assert parts("<p><s>One</s><s>Two</s></p><p>Three</p>") == (
        Spoken("One"),
        Spoken("Two"),
        Pause(ssml.PARAGRAPH_PAUSE),
        Spoken("Three"),
        Pause(ssml.PARAGRAPH_PAUSE),
    )
    # Spoken as their text content, never their markup.
    said = parts(
        'Say <phoneme alphabet="ipa" ph="təˈmeɪtoʊ">tomato</phoneme> <mark name="m"/>'
        '<amazon:effect name="whispered">softly</amazon:effect> <w role="x">now</w>'
        '<acu-engine name="Polly"> ok</acu-engine> <lang xml:lang="fr-FR">oui</lang>'
        " <unheard-of>words</unheard-of>"
    )
    assert said == (Spoken("Say tomato softly now ok oui words"),)
    assert "<" not in ssml.spoken_text(f"<speak>{said}</speak>")


def test_audio_names_a_store_file_with_its_content_as_the_fallback() -> None:
    assert parts('Hi <audio src="welcome.wav">Welcome <break time="1s"/> all</audio>') == (
        Spoken("Hi"),
        StoreAudio("welcome.wav", (Spoken("Welcome"), Pause(1.0), Spoken("all"))),
    )
    # A URL is not fetched: its content is said.
    assert parts('<audio src="https://example.com/a.wav">Hello</audio>') == (Spoken("Hello"),)
    assert parts('<audio src="x.wav"><desc>a bell</desc></audio>') == (StoreAudio("x.wav"),)


def test_entities_are_their_characters() -> None:
    assert parts("Tom &amp; Jerry &lt;3") == (Spoken("Tom & Jerry <3"),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<speak>Hello", "malformed SSML: no element found (line 1, column 13)"),
        ("<speak>a & b</speak>", "malformed SSML: not well-formed (invalid token)"),
        ("<speak>a</speak><speak>b</speak>", "junk after document element"),
        ("<speak><p>a</speak>", "mismatched tag"),
        ('<?xml version="1.0"?><p>a</p>', "SSML must be one <speak> element"),
        ('<!DOCTYPE speak [<!ENTITY a "aa">]><speak>&a;</speak>', "must not have a DOCTYPE"),
        ('<speak><break time="5 parsecs"/></speak>', "<break> time='5 parsecs' is not like"),
        ('<speak><break time="11s"/></speak>', "is over 10 s"),
        ('<speak><break strength="huge"/></speak>', "<break> strength='huge' is not one of"),
        ('<speak><prosody rate="zoom">x</prosody></speak>', "rate='zoom'"),
        ('<speak><prosody rate="500%">x</prosody></speak>', "rate='500%'"),
        ('<speak><prosody volume="max">x</prosody></speak>', "volume='max'"),
        ('<speak><emphasis level="huge">x</emphasis></speak>', "level='huge'"),
        ("<speak>\n <say-as>1</say-as></speak>", "<say-as> needs interpret-as (line 2, column 2)"),
        ("<speak><sub>W3C</sub></speak>", "<sub> needs alias"),
    ],
)
def test_malformed_ssml_is_refused_with_where(text: str, message: str) -> None:
    with pytest.raises(ssml.SsmlError) as caught:
        ssml.parts(text)
    assert message in str(caught.value)


def test_ssml_nested_too_deep_is_refused_not_a_recursion_error() -> None:
    deep = "<speak>" + "<p>" * 5000 + "deep" + "</p>" * 5000 + "</speak>"
    with pytest.raises(ssml.SsmlError, match="nested more than 64 elements deep"):
        ssml.parts(deep)
    fine = "<speak>" + "<s>" * 60 + "fine" + "</s>" * 60 + "</speak>"
    assert ssml.parts(fine) == (Spoken("fine"),)


def test_malformed_ssml_makes_the_action_list_invalid_at_its_json_path() -> None:
    items = [{"text_to_say": "Fine."}, {"text_to_say": '<speak>Wait <break time="x"/></speak>'}]
    body = json.dumps({"actions": [{"play": {"play_list": items}}]})
    with pytest.raises(InvalidResponse) as caught:
        parse_response(body)
    assert "actions[0].play.play_list[1].text_to_say" in str(caught.value)
    assert "<break> time='x' is not like 500ms or 2s" in str(caught.value)
    good = [{"text_to_say": '<speak>Wait <break time="1s"/> please.</speak>'}]
    parse_response(json.dumps({"actions": [{"play": {"play_list": good}}]}))


class _Engine:
    name = "piper"

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def voices(self) -> list[str]:
        return ["joe"]

    def voice_for(self, language: str) -> str | None:
        return "joe"

    def warm_up(self) -> None:
        pass

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> np.ndarray:
        self.calls.append((text, rate))
        return np.full(800, 1000, dtype=np.int16)


def test_the_synthesiser_speaks_the_parts_at_their_rate_volume_and_pauses() -> None:
    engine = _Engine()
    synthesiser = Synthesiser([engine], "piper:joe")
    audio = synthesiser.speak(
        '<speak>One <break time="250ms"/><prosody rate="slow" volume="-6dB">two</prosody>'
        '<audio src="x.wav">three</audio></speak>'
    )
    assert engine.calls == [("One", 1.0), ("two", 0.8), ("three", 1.0)]
    assert len(audio) == 800 + 2000 + 800 + 800
    assert np.all(audio[800:2800] == 0)
    assert abs(int(audio[2800]) - 501) <= 1  # -6 dB
    # the rate is part of the cache's key
    synthesiser.speak('<speak><prosody rate="slow">two</prosody> two</speak>')
    assert engine.calls[3:] == [("two", 1.0)]


def test_volume_up_stops_at_the_peak_ceiling_and_silent_is_silence() -> None:
    audio = np.array([0, 16000, -20000], dtype=np.int16)
    louder = at_volume(audio, 10.0)
    assert int(np.max(np.abs(louder.astype(np.int32)))) == round(
        10 ** (PEAK_CEILING_DBFS / 20) * 32767
    )
    assert not at_volume(audio, -math.inf).any()
    assert at_volume(audio, 0.0) is audio
