"""espeak-ng has one state per process: two engines used at once, from two threads, share
it under one lock (each initialising its own once crashed a test process with a segfault
in espeak_Synth, and could lose a voice). Run in a child process, so that a crash fails
this test instead of ending the run."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import threading
from callhook.speech.espeak import EspeakEngine
errors = []
def run(language, text):
    try:
        engine = EspeakEngine()
        voice = engine.voice_for(language)
        assert voice is not None, f"no voice for {language}"
        for _ in range(15):
            assert len(engine.synthesize(text, voice)) > 800
    except Exception as exc:
        errors.append(repr(exc))
threads = [
    threading.Thread(target=run, args=("es-ES", "facturación y soporte")),
    threading.Thread(target=run, args=("en-US", "hello there, how are you")),
    threading.Thread(target=run, args=("fr-FR", "bonjour, comment allez-vous")),
]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("errors:", errors)
raise SystemExit(1 if errors else 0)
"""


def test_engines_in_several_threads_share_one_espeak() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
