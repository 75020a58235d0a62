"""A client of Aculab Cloud's web services, written from Aculab's pages, not from callhook.

What it does is what Aculab's "Web Services Overview", "Starting Outbound Services" and
"Managing Files" and "WebRTC Clients" pages say a client does: the service's name is the path
(``https://ws.aculabcloud.net/file_list``), GET or POST with the parameters as a form,
HTTP Basic with ``cloudID/username`` and the API Access Key (``service_start``:
``cloudID/username/<outbound service name>`` and the outbound service's password),
``Accept: application/json`` on every request (so errors come back as JSON),
``rest_calls`` a JSON object with ``to``, ``from`` and ``token``, ``filetype``
``media``, File Write with ``encrypted`` set to true for an encrypted file. Where the
pages are silent (a rename's new name, how a file travels), it does what callhook's
docs/aculab.md says, and nothing else of callhook's is used.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import aiohttp


@dataclass
class Answer:
    """A web service's answer: its HTTP status and body (JSON when it is JSON)."""

    status: int
    body: Any
    raw: bytes


class AculabWebServices:
    """One account's web services at ``base`` (``https://ws.aculabcloud.net`` on Aculab)."""

    def __init__(
        self,
        base: str,
        cloud_id: str,
        username: str,
        access_key: str,
        source: str | None = None,
    ) -> None:
        self.base = base.rstrip("/")
        self.account = f"{cloud_id}/{username}"
        self.access_key = access_key
        self.source = source  # the local address to send from (None: any)

    async def _call(
        self,
        service: str,
        params: dict[str, str],
        auth: tuple[str, str],
        data: Any = None,
    ) -> Answer:
        connector = aiohttp.TCPConnector(local_addr=(self.source, 0)) if self.source else None
        async with (
            aiohttp.ClientSession(connector=connector) as http,
            http.post(
                f"{self.base}/{service}",
                data=data if data is not None else params,
                params=params if data is not None else None,
                headers={"Accept": "application/json", "Authorization": _basic(*auth)},
            ) as response,
        ):
            raw = await response.read()
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            return Answer(response.status, body, raw)

    def _key(self) -> tuple[str, str]:
        return (self.account, self.access_key)

    # --- Starting Outbound Services ------------------------------------------------------

    async def service_start(
        self, service: str, service_password: str, rest_calls: dict[str, Any] | list[Any]
    ) -> Answer:
        auth = (f"{self.account}/{service}", service_password)
        return await self._call("service_start", {"rest_calls": json.dumps(rest_calls)}, auth)

    async def service_status(self, reference_id: str) -> Answer:
        return await self._call("service_status", {"reference_id": reference_id}, self._key())

    async def service_cancel(self, reference_id: str) -> Answer:
        return await self._call("service_cancel", {"reference_id": reference_id}, self._key())

    async def application_status(self, application_instance_id: str) -> Answer:
        params = {"application_instance_id": application_instance_id}
        return await self._call("application_status", params, self._key())

    # --- Managing Files -------------------------------------------------------------------

    async def file_list(self, filetype: str = "media") -> Answer:
        return await self._call("file_list", {"filetype": filetype}, self._key())

    async def file_get(self, filename: str, filetype: str = "media") -> Answer:
        params = {"filetype": filetype, "filename": filename}
        return await self._call("file_get", params, self._key())

    async def file_write(
        self, filename: str, content: bytes, *, encrypted: bool = False, filetype: str = "media"
    ) -> Answer:
        form = aiohttp.FormData()
        form.add_field("filetype", filetype)
        form.add_field("filename", filename)
        form.add_field("encrypted", "true" if encrypted else "false")
        form.add_field("file", content, filename=filename.rsplit("/", 1)[-1])
        return await self._call("file_write", {}, self._key(), data=form)

    async def file_delete(self, filename: str, filetype: str = "media") -> Answer:
        params = {"filetype": filetype, "filename": filename}
        return await self._call("file_delete", params, self._key())

    async def file_rename(
        self, filename: str, new_filename: str, filetype: str = "media"
    ) -> Answer:
        params = {"filetype": filetype, "filename": filename, "new_filename": new_filename}
        return await self._call("file_rename", params, self._key())

    # --- WebRTC Clients -------------------------------------------------------------------

    async def webrtc_generate_token(
        self, client_id: str, ttl: int | None = None, enable_incoming: bool = True
    ) -> Answer:
        params = {"client_id": client_id, "enable_incoming": str(enable_incoming).lower()}
        if ttl is not None:
            params["ttl"] = str(ttl)
        return await self._call("webrtc_generate_token", params, self._key())

    async def webrtc_registered_clients(self) -> Answer:
        return await self._call("webrtc_registered_clients", {}, self._key())

    # --- Managing Conferences ---------------------------------------------------------------

    async def conference_list(self) -> Answer:
        return await self._call("conference_list", {}, self._key())

    async def conference_participant_list(self, conference_name: str) -> Answer:
        params = {"conference_name": conference_name}
        return await self._call("conference_participant_list", params, self._key())

    async def conference_participant_set_options(
        self, conference_name: str, participant_id: str, **options: bool
    ) -> Answer:
        params = {"conference_name": conference_name, "participant_id": participant_id}
        params.update({k: str(v).lower() for k, v in options.items()})
        return await self._call("conference_participant_set_options", params, self._key())

    async def conference_participant_eject(
        self, conference_name: str, participant_id: str
    ) -> Answer:
        params = {"conference_name": conference_name, "participant_id": participant_id}
        return await self._call("conference_participant_eject", params, self._key())


def _basic(username: str, password: str) -> str:
    """HTTP Basic credentials (RFC 7617): ``Basic base64(username:password)``."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
