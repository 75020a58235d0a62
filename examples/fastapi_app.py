"""The voice applications of ``voiceapp`` served with FastAPI (and uvicorn).

FastAPI and uvicorn are not among callhook's own dependencies:
``.venv/bin/pip install 'fastapi>=0.110' 'uvicorn>=0.29'`` (``scripts/setup --test``
installs them with the test tools). Then, from the checkout:

    .venv/bin/python examples/fastapi_app.py --port 5000 --secret s3cret
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Request, Response
from voiceapp.pages import answer

from callhook import sdk


def application(secret: str) -> FastAPI:
    app = FastAPI()

    @app.post("/{path:path}", response_model=None)
    async def page(path: str, request: Request) -> dict[str, Any] | Response:
        body = await request.body()
        if not sdk.verify_signature(request.headers, body, secret):
            raise HTTPException(status_code=403, detail="bad signature")
        result = answer(path, body)
        if result is None:
            raise HTTPException(status_code=404)
        return result if result else Response(status_code=204)

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--secret", default="s3cret")
    args = parser.parse_args()
    uvicorn.run(application(args.secret), host="127.0.0.1", port=args.port, log_level="warning")
