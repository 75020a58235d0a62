"""Tracing off (no ``[tracing] endpoint``, the default): no span is recorded, no
``traceparent`` is sent, and a context carried across (a notification's row) is made
current and given back. Tracing on is tested end to end (tests/e2e/test_tracing.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from callhook.config.settings import ConfigError, load
from callhook.monitoring import tracing

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_off_no_header_is_sent_and_spans_cost_nothing() -> None:
    with tracing.span("call") as span:
        assert not span.is_recording()
        headers: dict[str, str] = {}
        tracing.inject(headers)
        assert headers == {} and tracing.traceparent() is None


def test_a_stored_traceparent_is_the_current_context_inside_within_only() -> None:
    with tracing.within(PARENT):
        assert tracing.traceparent() == PARENT  # (propagated as it came: no span of ours)
    assert tracing.traceparent() is None
    with tracing.within(None):
        assert tracing.traceparent() is None


def test_the_tracing_table(tmp_path: Path) -> None:
    path = tmp_path / "callhook.toml"
    path.write_text("")
    assert load(path).tracing.endpoint is None  # off by default
    path.write_text('[tracing]\nendpoint = "http://127.0.0.1:4318/v1/traces"\n')
    settings = load(path)
    assert settings.tracing.endpoint == "http://127.0.0.1:4318/v1/traces"
    assert settings.tracing.service_name == "callhook"
    for bad, why in (
        ('endpoint = "127.0.0.1:4317"', "must be an OTLP/HTTP URL"),
        ('service_name = ""', "service_name must not be empty"),
        ("sample = 1", "unknown keys: sample"),
    ):
        path.write_text(f"[tracing]\n{bad}\n")
        with pytest.raises(ConfigError, match=why):
            load(path)
