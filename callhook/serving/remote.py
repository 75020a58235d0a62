"""Asking a running ``serve`` over its REST API: ``callhook trunks``, ``bans`` and
``users``."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import Any


def get_api(host: str, port: int, path: str, secret: str) -> Any:
    """GET ``path`` of a running serve with the installation ``secret``; None (said on
    standard error) when it cannot be had."""
    where = f"[{host}]" if ":" in host else host
    request = urllib.request.Request(
        f"http://{where}:{port}{path}", headers={"Authorization": f"Bearer {secret}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        print(f"callhook: {host}:{port} answered {exc.code}: {detail}", file=sys.stderr)
    except OSError as exc:
        print(f"callhook: cannot reach serve at {host}:{port}: {exc}", file=sys.stderr)
    return None


def show(what: str, host: str, port: int, secret: str) -> int:
    """Print ``GET /api/<what>`` (``trunks``, ``bans`` or ``users``) of the serve at
    ``host``:``port`` as a table; the command's exit status."""
    found = get_api(host, port, f"/api/{what}", secret)
    if found is None:
        return 1
    table = {"trunks": trunk_table, "bans": ban_table, "users": user_table}[what]
    print(table(found))
    return 0


def trunk_table(trunks: list[dict[str, Any]]) -> str:
    """``/api/trunks`` as aligned columns: name, state, expires in, next try in, reason."""
    rows = [("NAME", "STATE", "EXPIRES IN", "NEXT TRY IN", "REASON")]
    for trunk in trunks:
        rows.append(
            (
                str(trunk.get("name", "")),
                str(trunk.get("state", "")),
                _seconds(trunk.get("expires_in")),
                _seconds(trunk.get("next_try_in")),
                str(trunk.get("reason") or ""),
            )
        )
    if len(rows) == 1:
        return "no trunks configured"
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4]
        for row in rows
    ).rstrip()


def ban_table(bans: list[dict[str, Any]]) -> str:
    """``/api/bans`` as aligned columns: address, time left, reason."""
    if not bans:
        return "no banned sources"
    width = max(len(b["address"]) for b in bans)
    lines = [f"{'ADDRESS'.ljust(width)}  LEFT     REASON"]
    for ban in bans:
        left = f"{ban['seconds_left']} s"
        lines.append(f"{ban['address'].ljust(width)}  {left.ljust(7)}  {ban['reason']}")
    return "\n".join(lines)


def user_table(phones: list[dict[str, Any]]) -> str:
    """``/api/users`` as aligned columns: user, where the phone is, expires in, contact."""
    if not phones:
        return "no phones registered"
    rows = [("USER", "FROM", "EXPIRES IN", "CONTACT")]
    for phone in phones:
        where = f"{phone.get('transport', '')} {phone.get('source', '')}"
        rows.append(
            (str(phone["user"]), where, _seconds(phone.get("expires_in")), phone["contact"])
        )
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3]
        for row in rows
    )


def _seconds(value: object) -> str:
    return "-" if value is None else f"{value} s"
