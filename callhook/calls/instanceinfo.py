"""What a page request carries: Aculab's *instance info* and its ``this_call``. Pure.

Every page callhook requests for an application (``first_page``, a ``next_page``, the
error and final pages) is sent the application instance's info: its id, the ``token``
the last page gave, its call log's name, whether it is a notification, the call as it
stands (``this_call``, Aculab's call info object) and, after an action or an error, its
``action_result`` or ``error_result`` (docs/behaviour.md, "Pages").
"""

from __future__ import annotations

from typing import Any

from callhook.ports import CallInfo


def this_call(
    info: CallInfo,
    state: str,
    seconds: float,
    application_parameters: str,
    primary_call_id: str | None = None,
) -> dict[str, Any]:
    """The call info object: who called whom, its state, and how long it has lasted since
    it was answered (``seconds``, to a tenth).

    Every property of Aculab's call info page, in its order, with its availability:
    ``call_divert`` always (empty unless an inbound call was diverted),
    ``call_attestation`` on inbound calls only, ``outbound_parameters`` on outbound
    calls started with parameters only; ``far_end_type`` and ``far_end_classification``
    (callhook's) on a classified call only. (The final page adds ``call_cause`` and
    ``call_raw_cause``.)
    """
    out: dict[str, Any] = {
        "call_id": info.call_id,
        "call_direction": info.direction,
        "call_from": info.call_from,
        "call_to": info.call_to,
        "call_target": info.call_target,
        "call_divert": info.divert if info.direction == "in" else "",
    }
    if info.direction == "in":
        out["call_attestation"] = info.attestation
    out["seconds_call_duration"] = round(max(0.0, seconds), 1)
    out["call_state"] = state
    out["application_parameters"] = application_parameters
    if info.direction == "out" and info.outbound_parameters is not None:
        out["outbound_parameters"] = info.outbound_parameters
    if primary_call_id is not None:  # callhook's: the call it is put through to
        out["primary_call_id"] = primary_call_id
    if info.far_end is not None:  # classified (classify_callee: docs/reference.md)
        out["far_end_type"] = info.far_end["far_end_type"]
        out["far_end_classification"] = dict(info.far_end)
    return out


def page_body(
    instance_id: str,
    token: str | None,
    log_filename: str,
    call: dict[str, Any],
    action_result: dict[str, Any] | None = None,
    error_result: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The body of a page request (POST; a GET carries it as ``instance_info``)."""
    body: dict[str, Any] = {
        "application_instance_id": instance_id,
        "token": token,
        "log_filename": log_filename,
        "is_notification": False,
        "this_call": call,
    }
    if action_result is not None:
        body["action_result"] = action_result
    if error_result is not None:
        body["error_result"] = error_result
    return body
