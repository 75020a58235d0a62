"""Aculab's web services' parameters and errors (callhook/webservices/aculab.py, api.py):
a parameter missing, malformed or given twice has Aculab's four-digit code; every error
has Aculab's JSON shape. (The services themselves: tests/e2e/test_webservices.py.)"""

from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import MultiDict

from callhook.httpserver.aculabshape import aculab_error, is_webservice
from callhook.httpserver.restapi import ApiError
from callhook.webservices.aculab import Params


def test_parameters() -> None:
    params = Params(MultiDict([("filetype", "media"), ("encrypted", "TRUE"), ("x", "")]))
    assert params.need("filetype") == "media"
    assert params.get("filename") is None
    assert params.flag("encrypted") is True
    assert params.flag("x", default=True) is True  # empty: the default
    with pytest.raises(ApiError) as missing:
        params.need("filename")
    assert (missing.value.status, missing.value.code) == (400, "0001")
    with pytest.raises(ApiError) as twice:
        Params(MultiDict([("filename", "a.wav"), ("filename", "b.wav")])).get("filename")
    assert twice.value.code == "0003"
    with pytest.raises(ApiError) as malformed:
        Params(MultiDict([("encrypted", "yes")])).flag("encrypted")
    assert malformed.value.code == "0002"


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [(400, "0001", "0001"), (404, "not_found", "HTTP 404"), (401, "unauthorized", "HTTP 401")],
)
def test_the_error_shape(status: int, code: str, expected: str) -> None:
    request = make_mocked_request("GET", "/file_get?filetype=media&filename=x.wav")
    response = aculab_error(request, status, code, "why")
    body = json.loads(response.body)  # type: ignore[arg-type]
    assert response.status == status
    assert set(body) == {"error", "request"}
    assert body["error"]["code"] == expected and body["error"]["text"] == "why"
    assert body["request"]["url"] == "/file_get"
    assert body["error"]["datetime"] == body["request"]["datetime"]
    assert len(body["error"]["datetime"]) == len("2021-01-15_08:56:24")
    assert ("WWW-Authenticate" in response.headers) == (status == 401)


def test_which_paths_are_web_services() -> None:
    assert is_webservice("/service_start") and is_webservice("/file_rename")
    assert not is_webservice("/api/v1/media") and not is_webservice("/file_list/x")
