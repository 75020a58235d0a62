"""SIP over TLS against one ``callhook serve``: handshakes per second, idle connections held.

    .venv/bin/python -m bench.tls_load [--seconds 5] [--concurrency 8] [--idle 1000]

``serve`` gets a TLS listener with a certificate from a test CA (trustme).
Then, from this process (asyncio, Python's ssl: the client's CPU counts on
the same 2 cores, so the rate is a lower bound):

* handshakes: ``--concurrency`` clients, each in a loop: connect, TLS
  handshake (verifying the certificate), one OPTIONS, its 200, close. Prints
  completed exchanges per second and serve's CPU per handshake;
* idle connections: ``--idle`` TLS connections opened and kept (from many
  127.0.x.y source addresses, 50 each: serve accepts at most 64 from one
  address), each having sent one OPTIONS and had its 200; serve's RSS before and after, so memory
  per idle connection; then checks every one still answers a ping.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import ssl
import tempfile
import time
from pathlib import Path

import trustme

from tests.e2e.harness import CALLHOOK, free_tcp_port, free_udp_port


def options(port: int, n: int) -> bytes:
    return (
        f"OPTIONS sip:bench@127.0.0.1:{port} SIP/2.0\r\n"
        f"Via: SIP/2.0/TLS 127.0.0.1:9;branch=z9hG4bK-b{n}\r\n"
        "From: <sip:bench@127.0.0.1>;tag=b\r\nTo: <sip:bench@127.0.0.1>\r\n"
        f"Call-ID: bench-{n}@127.0.0.1\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\n"
        "Content-Length: 0\r\n\r\n"
    ).encode()


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"SIP/2.0 200"):
        raise RuntimeError(head.decode(errors="replace"))


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def handshakes(port: int, client: ssl.SSLContext, seconds: float, workers: int) -> int:
    done = 0
    stop = time.monotonic() + seconds

    async def worker(w: int) -> None:
        nonlocal done
        n = 0
        while time.monotonic() < stop:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"
            )
            await exchange(reader, writer, options(port, w * 1_000_000 + n))
            writer.close()
            n += 1
            done += 1

    await asyncio.gather(*(worker(w) for w in range(workers)))
    return done


async def main_async(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.idle * 2 + 256)), hard))
    work = Path(tempfile.mkdtemp(prefix="tls-bench-"))
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    chain, key = work / "cert.pem", work / "key.pem"
    cert.private_key_pem.write_to_path(str(key))
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    port = free_tcp_port()
    (work / "callhook.toml").write_text(
        f'[sip]\ntls_port = {port}\ntls_certificate = "{chain}"\ntls_key = "{key}"\n'
    )
    client = ssl.create_default_context()
    ca.configure_trust(client)
    serve = await asyncio.create_subprocess_exec(
        *CALLHOOK,
        "serve",
        "--workers",
        "1",
        "--config",
        str(work / "callhook.toml"),
        "--sip",
        f"127.0.0.1:{free_udp_port()}",
        "--http",
        f"127.0.0.1:{free_tcp_port()}",
        "--data-dir",
        str(work / "data"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert serve.stdout is not None
    while b"SIP: tls" not in await serve.stdout.readline():
        pass
    drain = asyncio.create_task(serve.stdout.read())
    try:
        await asyncio.sleep(1.0)
        cpu0, t0 = cpu_seconds(serve.pid), time.monotonic()
        count = await handshakes(port, client, args.seconds, args.concurrency)
        elapsed, cpu = time.monotonic() - t0, cpu_seconds(serve.pid) - cpu0
        print(f"TLS handshakes + OPTIONS: {count / elapsed:.0f}/s with {args.concurrency} clients")
        print(f"  serve CPU per handshake: {cpu / count * 1000:.2f} ms")
        await asyncio.sleep(1.0)
        before = rss_kb(serve.pid)
        held = []
        for n in range(args.idle):
            # From many loopback addresses: serve takes at most MAX_PER_ADDRESS from one.
            source = f"127.0.{1 + n // (50 * 250)}.{2 + (n // 50) % 250}"
            reader, writer = await asyncio.open_connection(
                "127.0.0.1",
                port,
                ssl=client,
                server_hostname="127.0.0.1",
                local_addr=(source, 0),
            )
            await exchange(reader, writer, options(port, 10_000_000 + n))
            held.append((reader, writer))
        await asyncio.sleep(1.0)
        after = rss_kb(serve.pid)
        print(f"idle TLS connections held: {len(held)}")
        print(f"  serve RSS {before / 1024:.1f} MiB -> {after / 1024:.1f} MiB: ")
        print(f"  {(after - before) / len(held):.1f} KiB per idle connection")
        alive = 0
        for reader, writer in held:
            writer.write(b"\r\n\r\n")
            if await asyncio.wait_for(reader.readexactly(2), 10) == b"\r\n":
                alive += 1
        print(f"  {alive} of {len(held)} still answer a keep-alive ping")
        for _, writer in held:
            writer.close()
    finally:
        serve.terminate()
        await serve.wait()
        drain.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--idle", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
