"""callhook speech plug-ins, a worked example (docs/speech.md, "Plug-in engines").

- :class:`~callhook_example_speech.fasterwhisper.FasterWhisperRecogniser`, entry point
  ``faster-whisper`` in ``callhook.recognisers``: any Whisper model faster-whisper loads,
  on the CPU or a GPU, with your own decoding settings.
- :class:`~callhook_example_speech.sphinxstream.PocketsphinxLive`, entry point
  ``pocketsphinx-live`` in ``callhook.recognisers``: a recogniser that streams, decoding
  each utterance while the caller says it (the shape of a cloud service's streaming API).
- :class:`~callhook_example_speech.recorded.RecordedWords`, entry point ``recorded-words``
  in ``callhook.voices``: a voice made of recordings of single words (an IVR's number
  announcer in the voice of your own voice artist).
"""
