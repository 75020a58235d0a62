"""Every action an application may send, by its wire name (``{"<name>": {...}}``)."""

from __future__ import annotations

from callhook.actions.conferenceschema import ConnectToConference
from callhook.actions.connectschema import Connect, Transfer
from callhook.actions.fields import Strict
from callhook.actions.menuschema import RunMenu, RunSpeechMenu
from callhook.actions.schema import (
    ClearInput,
    DeleteFile,
    GetInput,
    GetNumber,
    HangUp,
    Play,
    Record,
    Redirect,
    Sleep,
    StartTranscription,
    StopTranscription,
)

Action = (
    Play
    | Connect
    | ConnectToConference
    | Transfer
    | GetNumber
    | GetInput
    | Record
    | RunMenu
    | RunSpeechMenu
    | Sleep
    | HangUp
    | Redirect
    | ClearInput
    | DeleteFile
    | StartTranscription
    | StopTranscription
)
ACTION_MODELS: dict[str, type[Strict]] = {
    m.name: m
    for m in (
        Play,
        Connect,
        ConnectToConference,
        Transfer,
        GetNumber,
        GetInput,
        Record,
        RunMenu,
        RunSpeechMenu,
        Sleep,
        HangUp,
        Redirect,
        ClearInput,
        DeleteFile,
        StartTranscription,
        StopTranscription,
    )
}
