"""Three small voice applications written with ``callhook.sdk``, framework-free: a PIN
entry, a speech menu and a voicemail. ``aiohttp_app.py``, ``flask_app.py`` and
``fastapi_app.py`` (beside this package) serve the same pages with each framework."""
