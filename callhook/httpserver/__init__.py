"""The HTTP server of ``callhook serve``.

Its aiohttp application, the REST API and its OpenAPI document, and the built-in demo.
"""
