"""Developer tools: the terminal phone, call flows and ``callhook test``."""
