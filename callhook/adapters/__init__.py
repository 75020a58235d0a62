"""Adapters: the only code that touches sockets, files of calls and the event loop."""
