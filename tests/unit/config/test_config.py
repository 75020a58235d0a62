"""The config file's recordings, media, conference and notifications settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from callhook.config.settings import ConfigError, load
from callhook.events import ClassifyOptions


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "callhook.toml"
    path.write_text(f'data_dir = "{tmp_path}"\n' + text)
    return path


def test_defaults_without_the_tables(tmp_path: Path) -> None:
    settings = load(write(tmp_path, ""))
    assert settings.recordings.max_bytes == 64 * 2**20
    assert (settings.notifications.first_retry, settings.notifications.max_retry) == (2.0, 600.0)
    assert settings.notifications.give_up_after == 86400.0
    assert (settings.media.remote_max_bytes, settings.media.remote_timeout) == (16 * 2**20, 10.0)
    media = settings.media
    assert (media.thread, media.max_lag, media.thread_fifo, media.thread_nice) == (True, 0.06, 0, 0)
    assert media.thread_receive is True


def test_the_media_threads_keys_are_read(tmp_path: Path) -> None:
    text = "[media]\nthread = false\nmax_lag_ms = 250\nthread_fifo = 10\nthread_nice = -5\n"
    media = load(write(tmp_path, text)).media
    assert (media.thread, media.max_lag, media.thread_fifo, media.thread_nice) == (
        False,
        0.25,
        10,
        -5,
    )
    assert load(write(tmp_path, "[media]\nmax_lag_ms = 0\n")).media.max_lag == 0
    assert load(write(tmp_path, "[media]\nthread_receive = false\n")).media.thread_receive is False


def test_the_conference_table_is_read(tmp_path: Path) -> None:
    rooms = load(write(tmp_path, "")).conference
    assert (rooms.max_participants, rooms.talker_dbov, rooms.talker_hangover) == (40, -45.0, 0.3)
    text = "[conference]\nmax_participants = 100\ntalker_dbov = -50\ntalker_hangover_ms = 500\n"
    rooms = load(write(tmp_path, text)).conference
    assert (rooms.max_participants, rooms.talker_dbov, rooms.talker_hangover) == (100, -50.0, 0.5)


def test_the_speech_model_is_read(tmp_path: Path) -> None:
    assert load(write(tmp_path, "")).speech.model == "tiny.en"
    assert load(write(tmp_path, '[speech]\nmodel = "small"\n')).speech.model == "small"


def test_the_media_table_is_read(tmp_path: Path) -> None:
    settings = load(write(tmp_path, "[media]\nremote_max_mb = 2\nremote_timeout = 3.5\n"))
    assert (settings.media.remote_max_bytes, settings.media.remote_timeout) == (2 * 2**20, 3.5)


def test_the_tables_are_read(tmp_path: Path) -> None:
    settings = load(
        write(
            tmp_path,
            "[recordings]\nmax_mb = 1.5\n"
            "[notifications]\nfirst_retry = 0.5\nmax_retry = 30\ngive_up_after = 3600\n",
        )
    )
    assert settings.recordings.max_bytes == int(1.5 * 2**20)
    assert (settings.notifications.first_retry, settings.notifications.max_retry) == (0.5, 30.0)
    assert settings.notifications.give_up_after == 3600.0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[recordings]\nmax_mb = 0\n", "max_mb must be above 0"),
        ("[recordings]\nmax_bytes = 10\n", "[recordings] unknown keys: max_bytes"),
        ("[notifications]\nfirst_retry = 10\nmax_retry = 5\n", "at most max_retry"),
        ("[notifications]\ngive_up_after = -1\n", "give_up_after must be above 0"),
        ("[notifications]\nretries = 3\n", "[notifications] unknown keys: retries"),
        ("[media]\nremote_max_mb = 0\n", "remote_max_mb must be above 0"),
        ("[conference]\nmax_participants = 1\n", "max_participants must be 2 to 350"),
        ("[conference]\ntalker_dbov = 3\n", "talker_dbov must be -90 to 0"),
        ("[conference]\ntalker_hangover_ms = -1\n", "talker_hangover_ms must be 0 to 5000"),
        ("[conference]\nlimit = 5\n", "[conference] unknown keys: limit"),
        ("[media]\nremote_timeout = 0\n", "remote_timeout must be above 0"),
        ("[media]\nmax_mb = 1\n", "[media] unknown keys: max_mb"),
        ("[media]\nmax_lag_ms = -1\n", "max_lag_ms must be 0"),
        ("[media]\nthread_fifo = 100\n", "thread_fifo must be 0"),
        ("[media]\nthread_nice = 20\n", "thread_nice must be -20 to 19"),
        ('[sip]\nexternal_address = "my.host"\n', "external_address must be an IP address"),
        ('[speech]\nmodel = "large-v3"\n', "[speech] model must be one of tiny.en, base, small"),
        ("[retention]\nrecordings_days = -1\n", "[retention] recordings_days must be 0"),
        ("[retention]\nlogs_days = 3\n", "[retention] unknown keys: logs_days"),
        ('[retention]\ncall_logs_days = "90"\n', "[retention] call_logs_days must be a number"),
        (
            '[apps.a]\nfirst_page = "http://a/"\n[apps.a.retention]\nrecordings_days = 40000\n',
            "[apps.a.retention] recordings_days must be 0",
        ),
        ('[apps.a]\nfirst_page = "http://a/"\nretention = 3\n', "apps.a.retention must be a table"),
    ],
)
def test_bad_values_are_named(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        load(write(tmp_path, text))


def test_external_address_is_an_ip_address(tmp_path: Path) -> None:
    assert load(write(tmp_path, "")).sip.external_address is None
    settings = load(write(tmp_path, '[sip]\nexternal_address = " 203.0.113.7 "\n'))
    assert settings.sip.external_address == "203.0.113.7"


def _tls_files(tmp_path: Path, *, passphrase: bytes | None = None) -> tuple[Path, Path]:
    import trustme
    from cryptography.hazmat.primitives import serialization

    cert = trustme.CA().issue_cert("127.0.0.1")
    chain, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    private = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    encryption: serialization.KeySerializationEncryption = serialization.NoEncryption()
    if passphrase is not None:
        encryption = serialization.BestAvailableEncryption(passphrase)
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )
    )
    return chain, key


def test_the_tls_listener_files_are_checked_at_load(tmp_path: Path) -> None:
    chain, key = _tls_files(tmp_path)
    path = tmp_path / "c.toml"
    path.write_text(
        f'[sip]\ntcp_port = 0\ntls_port = 5071\ntls_certificate = "{chain}"\ntls_key = "{key}"\n'
    )
    settings = load(path)
    assert (settings.sip.tcp_port, settings.sip.tls_port) == (0, 5071)
    assert settings.sip.tls_certificate == chain and settings.sip.tls_key == key


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('tls_certificate = "/nowhere.pem"', "no such file /nowhere.pem"),
        ("tls_port = 70000", "tls_port must be a port number"),
        ('tls_key = "KEY"', "tls_key needs tls_certificate"),
    ],
)
def test_bad_tls_settings_are_named(tmp_path: Path, table: str, problem: str) -> None:
    _, key = _tls_files(tmp_path)
    path = tmp_path / "c.toml"
    path.write_text("[sip]\n" + table.replace("KEY", str(key)) + "\n")
    with pytest.raises(ConfigError, match=problem):
        load(path)


def test_a_key_with_a_passphrase_is_a_config_error_not_a_prompt(tmp_path: Path) -> None:
    chain, key = _tls_files(tmp_path, passphrase=b"secret")
    path = tmp_path / "c.toml"
    path.write_text(f'[sip]\ntls_certificate = "{chain}"\ntls_key = "{key}"\n')
    with pytest.raises(ConfigError, match="encrypted with a passphrase"):
        load(path)


def test_outbound_and_egress_defaults_are_the_safe_ones(tmp_path: Path) -> None:
    settings = load(write(tmp_path, ""))
    assert settings.outbound.allow == () and settings.outbound.max_calls_per_app == 10
    assert settings.egress.allow_private is False
    assert (settings.egress.max_response_bytes, settings.egress.max_redirects) == (5 * 2**20, 3)


def test_outbound_and_egress_tables_are_read(tmp_path: Path) -> None:
    text = (
        '[outbound]\nallow = ["sip:*@10.0.0.*", "+44"]\nmax_calls_per_app = 3\n'
        "[egress]\nallow_private = true\nmax_response_mb = 1\nmax_redirects = 0\n"
        'endpoints = ["127.0.0.1:8765", "[::1]:9000", "agent.internal:443"]\n'
    )
    settings = load(write(tmp_path, text))
    assert settings.egress.endpoints == ("127.0.0.1:8765", "[::1]:9000", "agent.internal:443")
    assert settings.outbound.allow == ("sip:*@10.0.0.*", "+44")
    assert settings.outbound.max_calls_per_app == 3
    assert settings.egress.allow_private is True
    assert (settings.egress.max_response_bytes, settings.egress.max_redirects) == (2**20, 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[outbound]\nallow = ["premium"]\n', "[outbound] allow: 'premium' is neither"),
        ('[outbound]\nallow = "*"\n', "[outbound] allow must be a list"),
        ("[outbound]\nmax_calls_per_app = 0\n", "max_calls_per_app must be 1 to 100000"),
        (
            '[egress]\nendpoints = ["127.0.0.1"]\n',
            '[egress] endpoints must be a list of "host:port"',
        ),
        ('[egress]\nendpoints = ["a:70000"]\n', '[egress] endpoints must be a list of "host:port"'),
        ("[outbound]\ndestinations = []\n", "[outbound] unknown keys: destinations"),
        ('[egress]\nallow_private = "yes"\n', "allow_private must be true or false"),
        ("[egress]\nmax_redirects = 50\n", "max_redirects must be 0 to 20"),
        ("[egress]\nmax_response_mb = 0\n", "max_response_mb must be above 0"),
    ],
)
def test_bad_outbound_and_egress_settings_are_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(write(tmp_path, text))


def test_an_apps_classify_callee(tmp_path: Path) -> None:
    """Aculab's outbound service setting "Enable far-end classification", per application:
    true (the defaults) or a table of its options, each checked."""
    app = '[apps.out]\nfirst_page = "http://127.0.0.1:9/"\n'
    assert load(write(tmp_path, app)).apps["out"].classify_callee is None
    on = load(write(tmp_path, app + "classify_callee = true\n")).apps["out"]
    assert on.classify_callee == ClassifyOptions()
    table = (
        app + "[apps.out.classify_callee]\nmilliseconds_greeting = 3000\nwait_for_beep = false\n"
    )
    wanted = ClassifyOptions(milliseconds_greeting=3000, wait_for_beep=False)
    assert load(write(tmp_path, table)).apps["out"].classify_callee == wanted
    off = app + "[apps.out.classify_callee]\nenable = false\n"
    assert load(write(tmp_path, off)).apps["out"].classify_callee is None
    for bad, message in [
        ('classify_callee = "yes"', "true, false or a table"),
        ("classify_callee = { beep = 1 }", "unknown keys: beep"),
        ("classify_callee = { milliseconds_timeout = 99 }", "milliseconds_timeout: a whole"),
        ("classify_callee = { wait_for_beep = 1 }", "wait_for_beep: true or false"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            load(write(tmp_path, app + bad + "\n"))


def test_retention_is_for_ever_unless_set_and_an_application_amends_it(tmp_path: Path) -> None:
    from callhook.config.tables import RetentionSettings

    assert load(write(tmp_path, "")).retention == RetentionSettings()  # nothing deleted
    settings = load(
        write(
            tmp_path,
            "[retention]\ncall_logs_days = 90\nrecordings_days = 30\n"
            '[apps.a]\nfirst_page = "http://a/"\n'
            "[apps.a.retention]\nrecordings_days = 7\ncall_records_days = 0.5\n"
            '[apps.b]\nfirst_page = "http://b/"\n',
        )
    )
    assert settings.retention == RetentionSettings(call_logs_days=90, recordings_days=30)
    assert settings.apps["a"].retention == RetentionSettings(
        call_logs_days=90, recordings_days=7, call_records_days=0.5
    )
    assert settings.apps["b"].retention is None  # [retention]'s
