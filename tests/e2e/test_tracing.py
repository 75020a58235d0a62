"""One OpenTelemetry trace per call, exported over OTLP/HTTP to a receiver in the test
(OpenTelemetry's own protobuf messages, decoded as a collector does), from ``callhook
serve`` (one process, and two workers behind Kamailio): the call, its SIP setup, each page
request, each action, the recognition, the recording and its notification, all in one
trace; and the application's own span, joined to it through the ``traceparent`` header
its page request carried."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import propagate
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from callhook.devtools.harness import AppServer, Received
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, served, wait_for_request
from tests.e2e.rtpstream import Stream
from tests.e2e.test_recordings import clip, talk
from tests.e2e.test_speech import DIGITS, call_log

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


class Receiver:
    """An OTLP/HTTP trace receiver (``POST /v1/traces``, protobuf) on its own thread: the
    spans it got, each a dict of its service, names, ids and attributes."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        spans = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    service = {a.key: a.value.string_value for a in resource.resource.attributes}
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            spans.append(
                                {
                                    "service": service.get("service.name"),
                                    "instance": service.get("service.instance.id", ""),
                                    "name": span.name,
                                    "trace": span.trace_id.hex(),
                                    "id": span.span_id.hex(),
                                    "parent": span.parent_span_id.hex(),
                                    "error": span.status.code == 2,
                                    "attributes": {a.key: _value(a.value) for a in span.attributes},
                                }
                            )
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def traceparent(request: Received) -> str:
    """The request's W3C traceparent header ("" if none)."""
    return next((v for k, v in request.headers.items() if k.lower() == "traceparent"), "")


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_call_is_one_trace_with_the_applications_span_in_it(
    tmp_path: Path, app: AppServer, workers: int, receiver: Receiver
) -> None:
    # The application's own tracing: its spans go to the same receiver, each a child of
    # the traceparent its request carried.
    provider = TracerProvider(resource=Resource.create({"service.name": "the-application"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.url)))
    tracer = provider.get_tracer("the-application")

    def start(request: Received) -> dict[str, Any]:
        parent = propagate.extract({"traceparent": traceparent(request)})
        with tracer.start_as_current_span("choose the menu", context=parent):
            pass
        hints = {"word_hints": [{"words": DIGITS}]}
        return {
            "actions": [
                {
                    "get_input": {
                        "next_page": {"url": "/heard"},
                        "speech_input_mode": "auto",
                        "speech_recognition_options": hints,
                        "milliseconds_initial_timeout": 8000,
                    }
                }
            ]
        }

    app.page("/start", start)
    record = {
        "next_page": {"url": "/recorded"},
        "recording_available_page": {"url": "/available"},
        "milliseconds_max_silence": 1000,
    }
    app.page("/heard", [{"record": record}])
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/available", None)
    app.page("/final", None)
    stream = Stream(12.0).speech(clip("7_jackson_7.wav"), at=1.5).speech(talk(1, 2), at=5.0)
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=30000))
    # (The model loaded at start, workers too: loaded at the caller's "seven" on a busy
    # machine, the answer could come after the talk meant for the recording had begun.)
    config = f'[tracing]\nendpoint = "{receiver.url}"\n[speech]\npreload = true\n'
    async with served(tmp_path, app, workers, config) as server:
        run = await sipp.call(server.sip, tmp_path, *parts)
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/available", timeout=20), server.output
    # (serve's shutdown exported its last spans; the application's are flushed now)
    provider.shutdown()

    ours = [s for s in receiver.spans if s["service"] == "callhook"]
    (call,) = [s for s in ours if s["name"] == "call"]
    trace = [s for s in receiver.spans if s["trace"] == call["trace"]]
    names = sorted(s["name"] for s in trace)
    for wanted in (
        "sip setup",
        "action get_input",
        "recognition",
        "action record",
        "recording",
        "notification",
        "choose the menu",
    ):
        assert wanted in names, (wanted, names)
    pages = [s for s in trace if s["name"] == "page request"]
    assert sorted(s["attributes"]["callhook.why"] for s in pages) == sorted(
        ["first page", "get_input", "record", "final page"]
    ), pages
    by_id = {s["id"]: s for s in trace}

    def parent(span: dict[str, Any]) -> str:
        return str(by_id[span["parent"]]["name"]) if span["parent"] in by_id else "(none)"

    assert call["parent"] == ""  # the root
    assert {parent(s) for s in pages} == {"call"}
    assert call["attributes"]["callhook.call_cause"] == "completed"
    recognitions = [s for s in trace if s["name"] == "recognition"]
    assert len(recognitions) == 1, (
        f"{[s['attributes'] for s in recognitions]}\n{server.output}\n{call_log(tmp_path, app)}"
    )
    (recognition,) = recognitions
    assert parent(recognition) == "action get_input"
    assert recognition["attributes"]["callhook.alternatives"] == 1
    (recording,) = [s for s in trace if s["name"] == "recording"]
    assert parent(recording) == "action record"
    assert recording["attributes"]["callhook.filename"].startswith("recordings/")
    (notification,) = [s for s in trace if s["name"] == "notification"]
    assert notification["attributes"]["url.full"].endswith("/available")
    # The application's span: a child of the request of its first page.
    (mine,) = [s for s in trace if s["name"] == "choose the menu"]
    assert mine["service"] == "the-application"
    assert parent(mine) == "page request"
    assert by_id[mine["parent"]]["attributes"]["callhook.why"] == "first page"
    # Every page request carried the call's trace (W3C traceparent).
    for request in app.requests:
        header = traceparent(request)
        assert header.split("-")[1] == call["trace"], (request.path, header)
    assert not any(s["error"] for s in trace), [s for s in trace if s["error"]]
    if workers > 1:
        assert call["instance"].startswith("worker ")
