"""``start_transcription`` and ``stop_transcription``: what they ask of the call's leg.

Neither waits: the transcription runs beside the application's actions (Aculab REST API
v2), its phrases posted to ``results_page`` by the leg (telephony/leg.py with
speech/transcription.py), so the runner turns each into one command and goes on.
"""

from __future__ import annotations

from urllib.parse import urljoin

from callhook.actions.schema import StartTranscription, StopTranscription
from callhook.events import RecognitionOptions, StopTranscribing, Transcribe


def transcription_command(
    action: StartTranscription | StopTranscription,
    page_url: str,
    instance_id: str = "",
    log_filename: str = "",
) -> Transcribe | StopTranscribing:
    """The leg's command for ``action`` (``page_url``: where relative URLs resolve; the
    instance and its log file go into every result)."""
    if isinstance(action, StopTranscription):
        return StopTranscribing()
    options = action.speech_recognition_options
    return Transcribe(
        mode=action.transcription_mode,
        options=RecognitionOptions(
            language=options.language,
            word_hints=options.hint_words(),
            max_alternatives=options.max_alternatives,
        ),
        interim=action.enable_interim_results,
        results=(urljoin(page_url, action.results_page.url), action.results_page.method),
        transcription_id=action.id,
        instance_id=instance_id,
        log_filename=log_filename,
    )
