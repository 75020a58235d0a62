"""Wire models of Aculab REST API version 2's ``connect to conference`` action and its
``conference participant`` object (Aculab's pages name each property; the JSON keys are
those names in snake case, as Aculab's examples write them)."""

from __future__ import annotations

import re
from typing import Annotated, ClassVar

from pydantic import Field, field_validator, model_validator

from callhook.actions.connectschema import Connect, SecondaryCall, check_room_secondary_call
from callhook.actions.fields import DigitOrEmpty, Opt, Strict
from callhook.actions.schema import PlayAction, WebPageRequest
from callhook.events import ParticipantOptions

#: A room's name, as a ``con:`` destination takes it (callhook/dialplan/destinations.py):
#: printable, no space.
_ROOM = re.compile(r"[!-~]{1,128}")


class ConferenceParticipant(Strict):
    """How a participant takes part in a room (Aculab's ``conference participant``)."""

    talker: bool = True
    start_on_entry: bool = True
    destroy_on_exit: bool = False
    beep_on_entry: bool = True
    exit_digit: DigitOrEmpty = ""
    mute_digit: DigitOrEmpty = ""
    unmute_digit: DigitOrEmpty = ""
    while_stopped_media: Opt[PlayAction] = None
    name: Opt[PlayAction] = None
    has_joined_message: Opt[PlayAction] = None
    has_left_message: Opt[PlayAction] = None

    @model_validator(mode="after")
    def _digits(self) -> ConferenceParticipant:
        # One digit cannot both leave the room and mute (a mute digit may also unmute:
        # that is a toggle, as with no unmute digit).
        if self.exit_digit and self.exit_digit in (self.mute_digit, self.unmute_digit):
            raise ValueError(
                f"exit_digit {self.exit_digit!r} is also the mute or unmute digit: "
                "one digit cannot do both"
            )
        return self

    def options(self) -> ParticipantOptions:
        """What the room keeps of them (the media options are the action's)."""
        return ParticipantOptions(
            talker=self.talker,
            start_on_entry=self.start_on_entry,
            destroy_on_exit=self.destroy_on_exit,
            beep_on_entry=self.beep_on_entry,
            exit_digit=self.exit_digit,
            mute_digit=self.mute_digit,
            unmute_digit=self.unmute_digit,
        )


class ConnectToConference(Strict):
    """The ``connect_to_conference`` action: the caller joins the room ``name`` of its
    application, and ``next_page`` is requested when it leaves."""

    name: ClassVar[str] = "connect_to_conference"
    #: (The room's name: ``name`` is each action model's wire name.)
    room: Annotated[str, Field(alias="name", min_length=1)]
    hold_media: Opt[PlayAction] = None
    seconds_answer_timeout: Annotated[int, Field(ge=1)] = 30
    conference_participant: Opt[ConferenceParticipant] = None
    secondary_call: Opt[SecondaryCall] = None
    next_page: Opt[WebPageRequest] = None

    @field_validator("room")
    @classmethod
    def _room(cls, value: str) -> str:
        if not _ROOM.fullmatch(value):
            raise ValueError("a room's name: 1 to 128 printable characters, no space")
        return value

    @model_validator(mode="after")
    def _secondary(self) -> ConnectToConference:
        check_room_secondary_call(self.secondary_call)
        return self

    def participant(self) -> ConferenceParticipant:
        """The participant object given, or Aculab's defaults."""
        return self.conference_participant or ConferenceParticipant()

    @classmethod
    def of_connect(cls, connect: Connect) -> ConnectToConference:
        """A ``connect`` to ``con:ROOM`` as the ``connect_to_conference`` it is: the room
        joined with the participant defaults, the connect's media, timeout and pages."""
        (destination,) = connect.destinations
        return cls.model_construct(
            room=destination.split(":", 1)[1],
            hold_media=connect.hold_media,
            seconds_answer_timeout=connect.seconds_answer_timeout,
            conference_participant=None,
            secondary_call=connect.secondary_call,
            next_page=connect.next_page,
        )
