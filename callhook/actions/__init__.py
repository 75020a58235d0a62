"""Actions: wire models (``schema``) and the sans-IO state machines that run them."""

from __future__ import annotations

from callhook.actions.conference import ConferenceMachine, ConnectToRoom
from callhook.actions.conferenceschema import ConnectToConference
from callhook.actions.connect import ConnectMachine
from callhook.actions.connectschema import Connect, Transfer
from callhook.actions.gather import GatherMachine, GatherSpec
from callhook.actions.machine import ActionContext, ActionMachine
from callhook.actions.menu import MenuMachine, MenuSpec
from callhook.actions.menuschema import RunMenu, RunSpeechMenu
from callhook.actions.play import PlayMachine, SleepMachine
from callhook.actions.record import RecordMachine
from callhook.actions.schema import GetInput, GetNumber, Play, Record, Sleep
from callhook.actions.transfer import TransferMachine

#: The actions that run on the call's media through a state machine.
MachineAction = (
    Play
    | GetNumber
    | GetInput
    | Record
    | RunMenu
    | RunSpeechMenu
    | Sleep
    | Connect
    | Transfer
    | ConnectToConference
)


def machine_for(action: MachineAction, ctx: ActionContext) -> ActionMachine:
    """The state machine that runs ``action`` on a call."""
    if isinstance(action, Play):
        return PlayMachine(action, ctx)
    if isinstance(action, GetNumber):
        return GatherMachine(GatherSpec.for_get_number(action), ctx)
    if isinstance(action, GetInput):
        return GatherMachine(GatherSpec.for_get_input(action), ctx)
    if isinstance(action, Record):
        return RecordMachine(action, ctx)
    if isinstance(action, RunMenu):
        return MenuMachine(MenuSpec.for_run_menu(action), ctx)
    if isinstance(action, RunSpeechMenu):
        return MenuMachine(MenuSpec.for_run_speech_menu(action), ctx)
    if isinstance(action, Connect):
        if action.destinations[0][:4].lower() == "con:":  # (then the only one: the schema's)
            return ConnectToRoom(action, ctx)
        return ConnectMachine(action, ctx)
    if isinstance(action, Transfer):
        return TransferMachine(action, ctx)
    if isinstance(action, ConnectToConference):
        return ConferenceMachine(action, ctx)
    return SleepMachine(action)
