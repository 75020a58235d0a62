"""The voice applications of ``voiceapp`` served with aiohttp.

python examples/aiohttp_app.py --port 5000 --secret s3cret
"""

from __future__ import annotations

import argparse

from aiohttp import web
from voiceapp.pages import answer

from callhook import sdk


def application(secret: str) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        body = await request.read()
        if not sdk.verify_signature(request.headers, body, secret):
            return web.Response(status=403, text="bad signature")
        result = answer(request.match_info["path"], body)
        if result is None:
            return web.Response(status=404)
        return web.json_response(result) if result else web.Response(status=204)

    app = web.Application()
    app.router.add_post("/{path:.+}", page)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--secret", default="s3cret")
    args = parser.parse_args()
    web.run_app(application(args.secret), host="127.0.0.1", port=args.port, print=None)
