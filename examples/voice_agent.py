"""A voice agent: a WebSocket server that a ``connect`` puts the caller through to.

Say a number and it says it back doubled; press a key and it doubles the key; say
"goodbye" and it says goodbye and hangs up. It hears and speaks with callhook's own
embedded engines (the voice-activity detector, recogniser and voice ``serve`` uses), in
the protocol of docs/behaviour.md ("connect to a WebSocket"): Aculab's
``v2.ws.cloud.aculab.com``, 8 kHz linear PCM both ways, ``dtmf`` and ``call_hangup``
messages, ``clear`` when the caller talks over its answer::

    python examples/voice_agent.py --port 8765 &
    python examples/actions_app.py --port 5000 --secret s3cret &
    callhook serve --config examples/serve.toml &
    # call sip:agent@127.0.0.1:5060 (a SIP phone, or the web phone at
    # http://127.0.0.1:8080/phone with the application "agent")

A real agent would put a language model where :func:`answer` is. This one answers at
once, and sends each answer as one burst of audio, as speech models do: callhook paces
it out to the caller.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import ssl
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt
from aiohttp import WSMsgType, web

from callhook.edge.speechworkers import build_recogniser, build_synthesiser
from callhook.events import RecognitionOptions
from callhook.media.utterances import Utterance, UtteranceCutter
from callhook.media.vad import new_detector
from callhook.telephony.wsprotocol import V2

logger = logging.getLogger("voice_agent")

GREETING = "Hello. Say a number, and I will double it."
FRAME = 160  # 20 ms at 8 kHz

_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen "
_UNITS += "fourteen fifteen sixteen seventeen eighteen nineteen"
UNITS = {word: n for n, word in enumerate(_UNITS.split())}
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety"
TENS = {word: 10 * n for n, word in enumerate(_TENS.split(), start=2)}


def number_in(text: str) -> int | None:
    """The first number said in ``text`` ("7", "seven", "twenty one"), or None."""
    words = re.findall(r"[a-z]+|\d+", text.lower().replace("-", " "))
    for i, word in enumerate(words):
        if word.isdigit():
            return int(word)
        if word in TENS:
            nxt = words[i + 1] if i + 1 < len(words) else ""
            return TENS[word] + (UNITS[nxt] if nxt in UNITS and UNITS[nxt] < 10 else 0)
        if word in UNITS:
            return UNITS[word]
        if word in ("for", "to", "too") and len(words) == 1:  # a lone digit, misheard
            return {"for": 4, "to": 2, "too": 2}[word]
    return None


def answer(text: str) -> tuple[str, bool]:
    """What the agent says to the caller's ``text``, and whether it then hangs up."""
    lowered = text.lower()
    if "bye" in lowered:
        return "Goodbye.", True
    n = number_in(lowered)
    if n is None:
        return "I did not catch a number. Say a number, or say goodbye.", False
    return f"{n} doubled is {2 * n}.", False


class Agent:
    """The engines, loaded once, shared by every call."""

    def __init__(self, voice: str, model: str) -> None:
        synthesiser = build_synthesiser(voice)
        recogniser = build_recogniser("whisper", model)
        if synthesiser is None or recogniser is None:
            raise SystemExit("the embedded speech engines are not installed (scripts/setup)")
        self.synthesiser = synthesiser
        self.recogniser = recogniser
        synthesiser.warm_up()  # the first caller does not wait for the models to load
        recogniser.warm_up()
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="agent-speech")

    async def speak(self, text: str) -> bytes:
        loop = asyncio.get_running_loop()
        audio = await loop.run_in_executor(self.pool, self.synthesiser.speak, text)
        return audio.astype("<i2").tobytes()

    async def hear(self, audio: npt.NDArray[np.int16]) -> str:
        loop = asyncio.get_running_loop()
        options = RecognitionOptions()
        found = await loop.run_in_executor(self.pool, self.recogniser.recognise, audio, options)
        return found[0].text if found else ""


class Conversation:
    """One call: what the caller says is cut into utterances, each answered."""

    def __init__(self, agent: Agent, ws: web.WebSocketResponse) -> None:
        self.agent = agent
        self.ws = ws
        self.vad = new_detector()
        self.cutter = UtteranceCutter()
        self.pending = np.zeros(0, dtype=np.int16)
        self.speaking_until = 0.0  # when the audio sent so far has been played
        self.turns: asyncio.Queue[str] = asyncio.Queue()
        self.hearing: list[asyncio.Task[None]] = []

    async def say(self, text: str) -> None:
        pcm = await self.agent.speak(text)
        await self.ws.send_bytes(pcm)  # all at once: callhook plays it in real time
        loop = asyncio.get_running_loop()
        self.speaking_until = max(self.speaking_until, loop.time()) + len(pcm) / 16000
        logger.info("said %r", text)

    async def audio(self, data: bytes) -> None:
        self.pending = np.concatenate([self.pending, np.frombuffer(data, dtype="<i2")])
        while len(self.pending) >= FRAME:
            frame, self.pending = self.pending[:FRAME].astype(np.int16), self.pending[FRAME:]
            for item in self.cutter.feed(frame, self.vad.feed(frame)):
                if isinstance(item, Utterance):
                    # Heard beside the reading, which goes on meanwhile.
                    self.hearing.append(asyncio.create_task(self.hear(item.audio)))
                elif asyncio.get_running_loop().time() < self.speaking_until:
                    # The caller talks over the answer: stop it at once (barge-in).
                    await self.ws.send_str(json.dumps({"type": "clear"}))
                    self.speaking_until = 0.0

    async def hear(self, audio: npt.NDArray[np.int16]) -> None:
        text = await self.agent.hear(audio)
        logger.info("heard %r", text)
        if text.strip():
            await self.turns.put(text)

    async def talk(self) -> None:
        """Answer each turn; hang up after goodbye (once it has been heard)."""
        await self.say(GREETING)
        while True:
            text = await self.turns.get()
            reply, done = answer(text)
            await self.say(reply)
            if done:
                left = self.speaking_until - asyncio.get_running_loop().time()
                await asyncio.sleep(max(0.0, left))
                await self.ws.send_str(json.dumps({"type": "call_hangup", "raw_cause": "200"}))
                return


async def handle(request: web.Request) -> web.StreamResponse:
    agent: Agent = request.app["agent"]
    ws = web.WebSocketResponse(protocols=(V2,))  # answer with the one protocol spoken
    await ws.prepare(request)
    if ws.ws_protocol != V2:
        await ws.close(code=4000, message=b"this agent speaks v2.ws.cloud.aculab.com")
        return ws
    call = Conversation(agent, ws)
    talking: asyncio.Task[None] | None = None
    async for message in ws:
        if message.type is WSMsgType.BINARY:
            await call.audio(message.data)
        elif message.type is WSMsgType.TEXT:
            data = json.loads(message.data)
            if data.get("type") == "start":
                logger.info("a call from %s", data.get("call", {}).get("call_from"))
                talking = asyncio.create_task(call.talk())
            elif data.get("type") == "dtmf":
                await call.turns.put(str(data.get("digit", "")))
            elif data.get("type") == "call_hangup":
                break
    for task in [talking, *call.hearing]:
        if task is not None:
            task.cancel()
    return ws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--certificate", help="serve wss:// with this certificate (PEM)")
    parser.add_argument("--key", help="its private key (PEM)")
    parser.add_argument("--voice", default="piper:joe")
    parser.add_argument("--model", default="tiny.en")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    app = web.Application()
    app["agent"] = Agent(args.voice, args.model)
    app.router.add_get("/agent", handle)
    context = None
    if args.certificate:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.certificate, args.key)
    scheme = "wss" if context is not None else "ws"
    print(f"voice agent: {scheme}://{args.host}:{args.port}/agent", flush=True)
    web.run_app(app, host=args.host, port=args.port, ssl_context=context, print=None)


if __name__ == "__main__":
    main()
