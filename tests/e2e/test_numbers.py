"""Routing by dialled number on real calls: ``[apps.X] numbers`` with SIPp calling ``serve``
(one process, and workers behind Kamailio).

A provider writes the number its own way, in the request-URI or only in To;
the application that owns the number answers either way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from callhook.devtools.harness import AppServer
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, served

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_dialled_number_runs_the_application_that_owns_it(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    for path in ("/support", "/start"):
        app.page(path, [{"sleep": {"seconds": 0.2}}, {"hang_up": {}}])
    app.page("/final", None)
    config = (
        f'[apps.support]\nfirst_page = "{app.url("/support")}"\nsecret = "{app.secret}"\n'
        'numbers = ["+44 1234 567890"]\n'
    )
    national = sipp.invite("01234567890")  # the number in national form, in the request-URI
    to_only = sipp.invite("gateway").replace(
        "To: <sip:gateway@", "To: <sip:441234567890@"
    )  # the request-URI names the gateway; the number is only in To
    other = sipp.invite("+449999999999")  # a number nobody owns: the default application
    bye = sipp.BYE_FROM_SERVER.format(timeout_ms=15000)
    async with served(tmp_path, app, workers, config) as server:
        for invite in (national, to_only, other):
            run = await sipp.call(server.sip, tmp_path, invite, sipp.ANSWERED, bye)
            assert run.returncode == 0, run.output + run.errors + server.output
    assert len(app.bodies("/support")) == 2
    assert len(app.bodies("/start")) == 1
    calls_to = [b["this_call"]["call_to"] for b in app.bodies("/support")]
    assert any("01234567890" in c for c in calls_to) and any("441234567890" in c for c in calls_to)
