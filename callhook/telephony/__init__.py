"""The telephony service: SIP calls in and out.

Their legs and media, connect, transfer, the web phone, trunks at run time, registered users.
"""
