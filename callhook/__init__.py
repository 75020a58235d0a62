"""callhook: self-hosted telephony call control driven by JSON action lists.

A voice application is an ordinary web app. When a call arrives callhook
requests the application's first page; the page answers with an ordered list
of actions (``play``, ``get_number``, ``get_input``, ``record`` ...) which
callhook runs on the live call, posting each completed action's result to the
action's ``next_page``. The wire shape is the Aculab Cloud REST API v2.
"""

__version__ = "0.1.0"
