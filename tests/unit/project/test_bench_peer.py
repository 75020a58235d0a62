"""bench.peer's Asterisk side: the configuration it writes runs the kit's call with only the
modules it needs, on the ports the capture watches; the digits line it reads; its
readiness probe; and the one line it exits with when no Asterisk is installed."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from bench import asterisk, peer
from bench.ivr_load import RTP_FIRST, RTP_LAST, SIP_PORT


def test_the_configuration_runs_the_kits_call_and_reads_nothing_of_the_installation(
    tmp_path: Path,
) -> None:
    modules, data, kit = tmp_path / "modules", tmp_path / "data", tmp_path / "kit"
    conf = peer.write_config(tmp_path / "work", modules, data, kit)
    etc = conf.parent
    directories = conf.read_text()
    assert f"astmoddir => {modules}\n" in directories
    assert f"astdatadir => {data}\n" in directories
    assert f"astetcdir => {etc}\n" in directories  # (its own files only)
    loaded = etc.joinpath("modules.conf").read_text()
    assert "autoload = no" in loaded
    assert [line.split()[-1] for line in loaded.splitlines() if line.startswith("load")] == list(
        peer.MODULES
    )
    assert f"udpbindaddr = 127.0.0.1:{SIP_PORT}" in etc.joinpath("sip.conf").read_text()
    rtp = etc.joinpath("rtp.conf").read_text()
    assert f"rtpstart = {RTP_FIRST}" in rtp and f"rtpend = {RTP_LAST}" in rtp
    plan = etc.joinpath("extensions.conf").read_text()
    assert f"Playback({kit / 'sounds' / 'prompt'})" in plan
    assert f"Read(DIGITS,{kit / 'sounds' / 'beep'},4,,1,5)" in plan
    assert "Log(NOTICE,IVRDIGITS <${DIGITS}>)" in plan
    assert ",3,10,qu)" in plan  # 3 s of silence, 10 s at most, no beep, silence kept


def test_the_digits_are_read_from_the_log_line_including_none() -> None:
    log = (
        "[Nov 29 16:30:00] NOTICE[812][C-00000001]: Ext. ivr:4 @ ivr: IVRDIGITS <1234>\n"
        "[Nov 29 16:30:01] NOTICE[813][C-00000002]: Ext. ivr:4 @ ivr: IVRDIGITS <>\n"
    )
    assert peer.DIGITS_LINE.findall(log) == ["1234", ""]


def test_the_probe_sees_a_sip_answer_and_no_answer() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]

        def answer() -> None:
            data, source = server.recvfrom(4096)
            assert data.startswith(b"OPTIONS sip:ivr@127.0.0.1:")
            server.sendto(b"SIP/2.0 200 OK\r\n\r\n", source)

        thread = threading.Thread(target=answer)
        thread.start()
        assert peer.answers_options(port)
        thread.join()
        assert not peer.answers_options(port)  # bound, silent: no answer in time


def test_no_asterisk_is_one_line_that_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        peer.find_asterisk(tmp_path / "asterisk")
    assert "Asterisk 20 built with chan_sip" in str(exit_.value)
    assert "--asterisk" in str(exit_.value)
    assert "--build" in str(exit_.value)


def fake_asterisk(prefix: Path, says: str, chan_sip: bool = True) -> Path:
    binary = prefix / "sbin" / "asterisk"
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!/bin/sh\necho '{says}'\n")
    binary.chmod(0o755)
    if chan_sip:
        modules = prefix / "lib" / "asterisk" / "modules"
        modules.mkdir(parents=True)
        (modules / "chan_sip.so").write_bytes(b"")
    return binary


def test_an_earlier_build_is_reused_without_building(tmp_path: Path) -> None:
    binary = fake_asterisk(tmp_path / "asterisk-20.15.0", "Asterisk 20.15.0")
    # (No source is read, nothing is built: the source given does not exist.)
    assert asterisk.build(str(tmp_path / "nowhere"), tmp_path / "asterisk-20.15.0") == binary


def test_what_is_not_asterisk_20_with_chan_sip_is_not_reused(tmp_path: Path) -> None:
    assert asterisk.installed(fake_asterisk(tmp_path / "a", "Asterisk 21.1.0")) == ""
    assert asterisk.installed(fake_asterisk(tmp_path / "b", "Asterisk 20.15.0", False)) == ""
    assert asterisk.installed(fake_asterisk(tmp_path / "c", "Asterisk 20.15.0")) == (
        "Asterisk 20.15.0"
    )
