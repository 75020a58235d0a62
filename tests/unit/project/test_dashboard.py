"""The Grafana dashboard (deploy/grafana/callhook.json): a dashboard Grafana imports
(unique ids, a datasource variable in every query, panels that do not overlap), whose
queries name only metrics callhook exports. That each query runs in a real Prometheus
and answers is tested in tests/e2e/test_metrics.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

import callhook.monitoring.prometheus  # noqa: F401  (its families, on the registry)

DASHBOARD = Path(__file__).parents[3] / "deploy" / "grafana" / "callhook.json"
#: Read when scraped (not on the registry until a scrape asks for them).
SCRAPED = {"callhook_notifications", "callhook_notification_oldest_due_seconds", "callhook_bans"}


def exported() -> set[str]:
    names = set(SCRAPED)
    for family in REGISTRY.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_count", "_sum"))
    return {name for name in names if name.startswith("callhook_")}


def test_the_dashboard_is_one_grafana_imports() -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "callhook" and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] == "row":
            continue
        assert panel["description"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_query_names_only_metrics_callhook_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    known = exported()
    named = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            named |= set(re.findall(r"\bcallhook_[a-z_]+", target["expr"]))
    assert named, "no query names a callhook metric"
    assert named <= known, named - known
    # And every family callhook exports is on the dashboard.
    families = {re.sub(r"_(total|bucket|count|sum)$", "", name) for name in named}
    unshown = {
        name
        for name in known
        if not name.endswith(("_total", "_bucket", "_count", "_sum", "_created"))
        and name not in families
    }
    assert not unshown, f"exported but on no panel: {sorted(unshown)}"
