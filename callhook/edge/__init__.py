"""The IO edge: the sockets and threads the engine's ports are made of.

RTP and SIP sockets, the media tick's socket IO, the HTTP requests callhook makes,
speech on threads.
"""
