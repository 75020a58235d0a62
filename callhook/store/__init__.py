"""The media file store: recordings, prompts and call logs, per application namespace."""
