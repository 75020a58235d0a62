"""The conference services (callhook/webservices/conferences.py): Aculab's four web
services and ``/api/v1/conferences``, over real rooms with stand-in calls (as in
tests/unit/telephony/test_conferences.py), through the server's own error handling.
(Live calls muted and ejected through them: tests/e2e/test_conferences.py.)"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from callhook.config.settings import AppConfig
from callhook.events import JoinRoom, ParticipantOptions, RoomLeft
from callhook.httpserver import server as web
from callhook.httpserver.keys import KeyRing
from callhook.httpserver.restapi import Api
from callhook.store.files import MediaStore
from callhook.telephony.conferences import Conferences, LocalParticipant
from callhook.webservices.aculab import WebServices
from callhook.webservices.conferences import ConferenceApi, RoomViews
from tests.unit.telephony.test_conferences import Clock, call, events

KEY, OTHER_KEY = "conference-key-0123456789", "other-key-0123456789abc"
APPS = {
    name: AppConfig(name=name, first_page=f"http://127.0.0.1:1/{name}", secret="x" * 32)
    for name in ("app", "other")
}


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = Clock()
        self.clock.now = 100.0
        self.rooms = Conferences(self.clock)
        # The rooms. clock at 103 s (when asked) is 1,700,000,000 s since the epoch.
        views = RoomViews(self.rooms, wall=lambda: 1_700_000_000.0)
        rest = Api(MediaStore(tmp_path), KeyRing({KEY: "app", OTHER_KEY: "other"}), APPS.get)
        self.app = web.application(
            "secret",
            api=rest,
            webservices=WebServices(rest, lambda: None, rooms=views),
            extra=(ConferenceApi(views, rest),),
        )
        self.a, self.b = call("alice"), call("bob")
        self.rooms.join(LocalParticipant(self.a), JoinRoom("weekly"))
        self.clock.now = 103.0
        self.rooms.join(
            LocalParticipant(self.b),
            JoinRoom("weekly", ParticipantOptions(destroy_on_exit=True, beep_on_entry=False)),
        )
        events(self.a), events(self.b)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[World, TestClient[Any, Any]]]:
    w = World(tmp_path)
    async with TestClient(TestServer(w.app)) as client:
        yield w, client


def basic(key: str = KEY) -> dict[str, str]:
    token = base64.b64encode(f"1-2-0/user@example.com:{key}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def bearer(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def service(
    client: TestClient[Any, Any], name: str, key: str = KEY, **params: str
) -> tuple[int, Any]:
    async with client.post(f"/{name}", data=params, headers=basic(key)) as r:
        return r.status, await r.json()


async def test_the_rooms_and_their_participants_are_listed(
    world: tuple[World, TestClient[Any, Any]],
) -> None:
    _, client = world
    assert await service(client, "conference_list") == (
        200,
        {
            "conferences": [
                {
                    "conference_name": "weekly",
                    "state": "ACTIVE",
                    "participant_count": 2,
                    "created": "2023-11-14_22:13:17",
                }
            ]
        },
    )
    status, listed = await service(client, "conference_participant_list", conference_name="weekly")
    assert status == 200
    assert listed == {
        "conference_name": "weekly",
        "state": "ACTIVE",
        "participants": [
            {
                "participant_id": "alice",
                "talker": True,
                "muted": False,
                "start_on_entry": True,
                "destroy_on_exit": False,
                "joined": "2023-11-14_22:13:17",
            },
            {
                "participant_id": "bob",
                "talker": True,
                "muted": False,
                "start_on_entry": True,
                "destroy_on_exit": True,
                "joined": "2023-11-14_22:13:20",
            },
        ],
    }
    # Another application's key sees its own rooms: none.
    assert await service(client, "conference_list", OTHER_KEY) == (200, {"conferences": []})
    status, body = await service(
        client, "conference_participant_list", OTHER_KEY, conference_name="weekly"
    )
    assert status == 404 and body["error"]["code"] == "HTTP 404"


async def test_a_participant_is_muted_made_a_listener_and_ejected(
    world: tuple[World, TestClient[Any, Any]],
) -> None:
    w, client = world
    status, shown = await service(
        client,
        "conference_participant_set_options",
        conference_name="weekly",
        participant_id="bob",
        mute="true",
    )
    assert status == 200 and shown["muted"] is True and shown["talker"] is True
    room = w.rooms.rooms.get("app", "weekly")
    assert room is not None and room.talkers() == ["alice"]
    status, shown = await service(
        client,
        "conference_participant_set_options",
        conference_name="weekly",
        participant_id="alice",
        talker="false",
    )
    assert status == 200 and shown["talker"] is False
    w.clock.now = 110.0
    status, body = await service(
        client, "conference_participant_eject", conference_name="weekly", participant_id="alice"
    )
    assert (status, body) == (200, {"participant_id": "alice", "ejected": True})
    assert events(w.a) == [RoomLeft("ejected", 10.0)]
    status, body = await service(
        client, "conference_participant_eject", conference_name="weekly", participant_id="alice"
    )
    assert status == 404 and "no participant 'alice'" in body["error"]["text"]


@pytest.mark.parametrize(
    ("params", "code", "says"),
    [
        ({"participant_id": "bob", "mute": "true"}, "0001", "'conference_name' is missing"),
        ({"conference_name": "weekly", "mute": "true"}, "0001", "'participant_id' is missing"),
        ({"conference_name": "weekly", "participant_id": "bob"}, "0001", "give 'mute'"),
        (
            {"conference_name": "weekly", "participant_id": "bob", "mute": "yes"},
            "0002",
            "expected true or false",
        ),
        (
            {"conference_name": "monthly", "participant_id": "bob", "mute": "true"},
            "HTTP 404",
            "no conference 'monthly'",
        ),
    ],
)
async def test_set_options_says_what_is_wrong(
    world: tuple[World, TestClient[Any, Any]], params: dict[str, str], code: str, says: str
) -> None:
    _, client = world
    status, body = await service(client, "conference_participant_set_options", **params)
    assert status in (400, 404)
    assert body["error"]["code"] == code and says in body["error"]["text"]


async def test_wrong_credentials_are_refused(world: tuple[World, TestClient[Any, Any]]) -> None:
    _, client = world
    status, body = await service(client, "conference_list", "not-a-key-at-all-0123456")
    assert status == 401 and body["error"]["code"] == "HTTP 401"
    async with client.get("/api/v1/conferences") as r:
        assert r.status == 401


async def test_the_rest_api_lists_mutes_and_ejects(
    world: tuple[World, TestClient[Any, Any]],
) -> None:
    w, client = world
    async with client.get("/api/v1/conferences", headers=bearer()) as r:
        assert r.status == 200
        (room,) = (await r.json())["conferences"]
        assert room["created"] == "2023-11-14T22:13:17.000Z" and room["participant_count"] == 2
    async with client.get("/api/v1/conferences/weekly/participants", headers=bearer()) as r:
        assert [p["participant_id"] for p in (await r.json())["participants"]] == ["alice", "bob"]
    one = "/api/v1/conferences/weekly/participants/bob"
    async with client.patch(one, json={"muted": True}, headers=bearer()) as r:
        assert r.status == 200 and (await r.json())["muted"] is True
    for bad in ({}, {"muted": "yes"}, {"loud": True}, [True]):
        async with client.patch(one, json=bad, headers=bearer()) as r:
            assert r.status == 400, bad
            assert (await r.json())["error"]["code"] == "bad_request"
    async with client.patch(one, data=b"{", headers=bearer()) as r:
        assert r.status == 400
    w.clock.now = 113.0
    async with client.delete(one, headers=bearer()) as r:
        assert r.status == 200
    # bob had destroy_on_exit: the room ended with him, alice out too.
    assert events(w.b) == [RoomLeft("ejected", 10.0)]
    assert events(w.a) == [RoomLeft("destroyed", 13.0)]
    async with client.get("/api/v1/conferences", headers=bearer()) as r:
        assert (await r.json()) == {"conferences": []}
    async with client.delete(one, headers=bearer()) as r:
        assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"


async def test_the_rest_api_records_a_room(
    world: tuple[World, TestClient[Any, Any]], tmp_path: Path
) -> None:
    from tests.unit.telephony.test_roomrecording import Files

    w, client = world
    files = Files(tmp_path)
    w.rooms.open_recording = files.open
    at = "/api/v1/conferences/weekly/recording"
    for bad, says in (
        ({"mode": "stereo"}, "mode"),
        ({"channels": 17}, "channels is 1 to 16"),
        ({"channels": True}, "channels is 1 to 16"),
        ({"recording_available_page": {"url": "/relative"}}, "an http(s) URL"),
        ({"recording_available_page": {"url": "https://x.example", "method": "PUT"}}, "method"),
        ({"format": "alaw"}, "expected"),
    ):
        async with client.post(at, json=bad, headers=bearer()) as r:
            assert r.status == 400, bad
            assert says in (await r.json())["error"]["message"], bad
    async with client.delete(at, headers=bearer()) as r:
        assert r.status == 404  # (nothing being recorded)
    async with client.post(at, json={"mode": "separate"}, headers=bearer()) as r:
        assert r.status == 201
        started = await r.json()
    assert started["channels"] == 2 and started["mode"] == "separate"  # (two in the room)
    async with client.post(at, headers=bearer()) as r:
        assert r.status == 409 and (await r.json())["error"]["code"] == "already_recording"
    async with client.post("/api/v1/conferences/monthly/recording", headers=bearer()) as r:
        assert r.status == 404
    async with client.delete(at, headers=bearer()) as r:
        assert r.status == 200
        assert (await r.json())["filename"] == started["filename"]
    assert [reason for _, _, reason in files.ended] == ["stopped"]
