"""Speech: text-to-speech and speech recognition engines behind small interfaces."""
