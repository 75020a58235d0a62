"""docs/reference.md against the code: every action of the catalogue has its section, and
every property its wire model accepts is a row of that section's tables, with the
code's default, allowed values and bounds. The objects nested in the actions (a web
page request, a cipher, ``secondary_call``, ...) have their rows too, the response
envelope its section, and every field callhook puts in a page request appears under
"Page requests". The links of docs/reference.md and docs/behaviour.md reach headings
that exist.

Nothing here lists the actions or their properties: they come from
:data:`callhook.actions.catalogue.ACTION_MODELS` and the models' ``model_fields``.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import annotated_types
import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from callhook.actions.catalogue import ACTION_MODELS
from callhook.actions.response import Envelope
from callhook.calls.instanceinfo import page_body, this_call
from callhook.ports import CallInfo, PageError

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = ROOT / "docs" / "reference.md"
TEXT = REFERENCE.read_text(encoding="utf-8")
#: A heading of a Markdown text (not inside a fenced code block).
HEADING = re.compile(r"^(#{1,6}) +(.+?) *$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]*)\)")


# --- reading the document ----------------------------------------------------------------


def section(text: str, title: str) -> str:
    """The text under the heading ``title`` (exactly, as written), up to the next heading
    of the same level or above; empty when there is no such heading."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        found = re.fullmatch(r"(#{1,6}) +(.+?) *", line)
        if found and found.group(2) == title:
            level = len(found.group(1))
            end = start + 1
            while end < len(lines):
                other = re.fullmatch(r"(#{1,6}) +.+", lines[end])
                if other and len(other.group(1)) <= level:
                    break
                end += 1
            return "\n".join(lines[start:end])
    return ""


def rows(text: str, name: str) -> list[list[str]]:
    """The cells of every table row of ``text`` whose first cell is `` `name` ``."""
    found = []
    for line in text.splitlines():
        if line.startswith(f"| `{name}` |"):
            found.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return found


# --- reading the models ------------------------------------------------------------------


def nested_models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The wire models an annotation refers to, through lists, unions and ``Annotated``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from nested_models(arg)


def is_wrapper(model: type[BaseModel]) -> bool:
    """``{"play": {...}}``, ``{"connect": {...}}``: the keyed form of an action, whose one
    property is the action's name (its rows are the action's own)."""
    return len(model.model_fields) == 1 and next(iter(model.model_fields)) in ACTION_MODELS


def reachable(models: list[type[BaseModel]]) -> list[type[BaseModel]]:
    """Every model nested in ``models`` (not those themselves), each once."""
    seen: list[type[BaseModel]] = []
    todo = [m for top in models for f in top.model_fields.values() for m in nested(f)]
    while todo:
        model = todo.pop()
        if model in seen or model in models:
            continue
        seen.append(model)
        todo += [m for f in model.model_fields.values() for m in nested(f)]
    return seen


def nested(field: FieldInfo) -> list[type[BaseModel]]:
    return list(nested_models(field.annotation))


def literal_values(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [v for arg in typing.get_args(annotation) for v in literal_values(arg)]


def bounds(field: FieldInfo) -> list[Any]:
    found: list[Any] = []
    for item in field.metadata:
        for kind, attr in (
            (annotated_types.Ge, "ge"),
            (annotated_types.Gt, "gt"),
            (annotated_types.Le, "le"),
            (annotated_types.Lt, "lt"),
            (annotated_types.MinLen, "min_length"),
            (annotated_types.MaxLen, "max_length"),
        ):
            if isinstance(item, kind):
                found.append(getattr(item, attr))
    return found


def problems_of_row(cells: list[str], name: str, field: FieldInfo) -> list[str]:
    """What a property's row (property | type | default | meaning) says wrong or leaves
    out: required-ness and default, allowed values, bounds."""
    if len(cells) != 4:
        return [f"`{name}`: expected 4 cells (property, type, default, meaning), got {cells}"]
    row = " | ".join(cells)
    default_cell = cells[2]
    problems = []
    if field.is_required():
        if "required" not in default_cell:
            problems.append(f"`{name}` is required: its default cell should say so")
    else:
        default = field.default
        if field.default_factory is not None:
            made = field.default_factory()  # type: ignore[call-arg]
            default = made if isinstance(made, list) else None
        if isinstance(default, bool | int | float | str | list):
            wanted = f"`{json.dumps(default)}`"
            if wanted not in default_cell:
                problems.append(f"`{name}`: default {wanted} not in its default cell")
    for value in literal_values(field.annotation):
        if f"`{json.dumps(value)}`" not in row:
            problems.append(f"`{name}`: allowed value `{json.dumps(value)}` not in its row")
    for bound in bounds(field):
        if not re.search(rf"(?<![\d.]){re.escape(str(bound))}(?![\d.])", cells[1] + cells[3]):
            problems.append(f"`{name}`: bound {bound} not in its type or meaning")
    return problems


def action_heading(name: str) -> str:
    return f"`{name}`"


# --- the tests ---------------------------------------------------------------------------


ACTIONS = sorted(ACTION_MODELS)


def test_the_catalogue_has_actions() -> None:
    assert len(ACTIONS) >= 10  # the parametrised tests below are not vacuous


@pytest.mark.parametrize("name", ACTIONS)
def test_every_action_has_its_section_in_the_contents(name: str) -> None:
    assert section(TEXT, action_heading(name)), f"docs/reference.md has no '### `{name}`'"
    contents = section(TEXT, "Contents")
    assert f"[`{name}`](#{slug(action_heading(name))})" in contents, (
        f"`{name}` is not in the contents"
    )


@pytest.mark.parametrize("name", ACTIONS)
def test_every_property_of_an_action_is_a_row_of_its_section(name: str) -> None:
    text = section(TEXT, action_heading(name))
    problems = []
    for attr, field in ACTION_MODELS[name].model_fields.items():
        prop = field.alias or attr  # (its name on the wire)
        found = rows(text, prop)
        if not found:
            problems.append(f"`{prop}` has no row in the section of `{name}`")
            continue
        problems += problems_of_row(found[0], prop, field)
    assert problems == [], f"`{name}`: " + "; ".join(problems)


def test_every_property_of_a_nested_object_is_a_row() -> None:
    problems = []
    for model in reachable([*ACTION_MODELS.values(), Envelope]):
        if is_wrapper(model):
            continue
        for attr, field in model.model_fields.items():
            prop = field.alias or attr  # (its name on the wire)
            found = rows(TEXT, prop)
            if not found:
                problems.append(f"{model.__name__}.{prop} has no row")
                continue
            # The same name may have rows in several tables: one of them must be right.
            checked = [problems_of_row(cells, prop, field) for cells in found]
            if all(checked):
                problems.append(f"{model.__name__}.{prop}: " + "; ".join(checked[0]))
    assert problems == []


def test_the_response_envelope_has_its_rows() -> None:
    text = section(TEXT, "The response")
    problems = []
    for prop, field in Envelope.model_fields.items():
        found = rows(text, prop)
        problems += (
            [f"`{prop}` has no row"] if not found else problems_of_row(found[0], prop, field)
        )
    assert problems == []


def test_every_field_of_a_page_request_is_described() -> None:
    inbound = CallInfo("c1", direction="in")
    outbound = CallInfo("c2", direction="out", outbound_parameters="{}")
    fields = {
        *page_body("i", None, "logs/i.log", {}, action_result={}, error_result={}),
        *this_call(inbound, "answered", 1.0, ""),
        *this_call(outbound, "idle", 1.0, "", primary_call_id="c1"),
        # The final page's (callhook/calls/runner.py adds them to this_call and the body).
        "call_cause",
        "call_raw_cause",
        "dropped_calls",
        *{"action", "result"},
    }
    error_fields = PageError("status", "http://app/x", "HTTP 500", status=500).as_json()
    text = section(TEXT, "Page requests")
    errors = section(TEXT, "The error page")
    missing = sorted(f for f in fields if not rows(text, f))
    missing += sorted(f"error_result.{f}" for f in error_fields if not rows(errors, f))
    assert missing == [], f"not described in docs/reference.md: {missing}"


# --- links -------------------------------------------------------------------------------


def slug(title: str) -> str:
    """A heading's anchor, as GitHub makes it."""
    text = title.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for _, title in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(title)
        anchor, n = base, 0
        while anchor in found:
            n += 1
            anchor = f"{base}-{n}"
        found.add(anchor)
    return found


@pytest.mark.parametrize("doc", ["reference.md", "behaviour.md"])
def test_every_link_reaches_a_heading(doc: str) -> None:
    path = ROOT / "docs" / doc
    broken = []
    for target in LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        if "://" in target or "#" not in target:
            continue
        file, anchor = target.split("#", 1)
        linked = path.parent / file if file else path
        if linked.suffix == ".md" and linked.exists() and anchor not in anchors(linked):
            broken.append(target)
    assert broken == [], f"docs/{doc}: links to headings that do not exist: {broken}"


def test_the_checks_can_fail() -> None:
    """The row check sees a wrong default and a missing allowed value."""
    field = ACTION_MODELS["get_input"].model_fields["speech_input_mode"]
    cells = ["`speech_input_mode`", 'string: `"timeout"`, `"auto"`', '`"auto"`', "..."]
    assert problems_of_row(cells, "speech_input_mode", field) == [
        '`speech_input_mode`: default `"timeout"` not in its default cell',
        '`speech_input_mode`: allowed value `"disabled"` not in its row',
    ]
    assert section("## A\nx\n## B\ny\n", "A") == "## A\nx"
    assert slug("`connect`: putting the caller through") == "connect-putting-the-caller-through"
