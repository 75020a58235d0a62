"""One OpenTelemetry trace per call, exported over OTLP (HTTP/protobuf) when ``[tracing]
endpoint`` is set; off (OpenTelemetry's no-op tracer, nearly free) otherwise.

A call's trace has a ``call`` span from its INVITE to its end, and in it the SIP setup
(the INVITE to the answer), each page request (the application's server gets a W3C
``traceparent`` header, so its own spans join the call's trace), each action, each
speech recognition and each recording; a notification delivered later (a recording's
``recording_available_page``) is a span of the same trace, whose context its row keeps.
Span names and attributes follow OpenTelemetry's semantic conventions where one fits
(``http.request.method``, ``url.full``, ``http.response.status_code``); callhook's own
are ``callhook.*``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

#: The spans' source (a proxy: no-op until :func:`start` sets a provider).
TRACER = trace.get_tracer("callhook")

_provider: Any = None


def start(endpoint: str, service_name: str, instance: str = "") -> None:
    """Export every span to the OTLP/HTTP ``endpoint`` (``.../v1/traces``), as
    ``service_name`` (``instance``: which worker or node; OpenTelemetry's
    ``service.instance.id``)."""
    global _provider
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes = {"service.name": service_name}
    if instance:
        attributes["service.instance.id"] = instance
    provider = TracerProvider(resource=Resource.create(attributes))
    # Batched on a thread of its own: a span ended on the event loop costs a queue append.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    _provider = provider


def stop() -> None:
    """Export what is still queued, then stop (serve's shutdown)."""
    if _provider is not None:
        _provider.shutdown()


def nanoseconds(seconds: float) -> int:
    """A wall-clock time as OpenTelemetry's timestamps are (Unix nanoseconds)."""
    return int(seconds * 1e9)


@contextlib.contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    start_time: float | None = None,
) -> Iterator[Span]:
    """A span of ``name``, current inside the ``with`` (its children's parent, the
    ``traceparent`` sent); :func:`failed` marks it failed."""
    with TRACER.start_as_current_span(
        name,
        kind=kind,
        attributes=dict(attributes or {}),
        start_time=nanoseconds(start_time) if start_time is not None else None,
        record_exception=False,
        # (A caller hanging up ends an action with an exception: not a failure.)
        set_status_on_exception=False,
    ) as current:
        yield current


def failed(current: Span, why: str) -> None:
    """Mark ``current`` failed, with why."""
    current.set_status(Status(StatusCode.ERROR, why))


def between(name: str, start: float, end: float, attributes: Mapping[str, Any]) -> None:
    """A span of the current trace that began and ended at these wall-clock times."""
    done = TRACER.start_span(name, attributes=dict(attributes), start_time=nanoseconds(start))
    done.end(end_time=nanoseconds(end))


def inject(headers: dict[str, str]) -> None:
    """Add the current span's W3C ``traceparent`` (and ``tracestate``) to ``headers``."""
    propagate.inject(headers)


def traceparent() -> str | None:
    """The current span's ``traceparent`` (None: no span, or tracing is off)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent")


@contextlib.contextmanager
def within(parent: str | None) -> Iterator[None]:
    """Make the span ``parent`` (a ``traceparent``) the current one inside the ``with``."""
    if not parent:
        yield
        return
    token = context.attach(propagate.extract({"traceparent": parent}))
    try:
        yield
    finally:
        context.detach(token)


def current() -> context.Context:
    """The current span's context, to be made current again elsewhere (another task)."""
    return context.get_current()


@contextlib.contextmanager
def resumed(saved: context.Context) -> Iterator[None]:
    """``saved`` (:func:`current`) the current context inside the ``with``."""
    token = context.attach(saved)
    try:
        yield
    finally:
        context.detach(token)
