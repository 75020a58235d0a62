"""The voice applications of ``voiceapp`` served with Flask.

Flask is not one of callhook's own dependencies: ``.venv/bin/pip install 'flask>=3.0'``
(``scripts/setup --test`` installs it with the test tools). Then, from the checkout:

    .venv/bin/python examples/flask_app.py --port 5000 --secret s3cret
"""

from __future__ import annotations

import argparse

from flask import Flask, Response, abort, jsonify, request
from voiceapp.pages import answer

from callhook import sdk


def application(secret: str) -> Flask:
    app = Flask(__name__)

    @app.post("/<path:path>")
    def page(path: str) -> Response:
        body = request.get_data()
        if not sdk.verify_signature(request.headers, body, secret):
            abort(403)
        result = answer(path, body)
        if result is None:
            abort(404)
        return jsonify(result) if result else Response(status=204)

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--secret", default="s3cret")
    args = parser.parse_args()
    application(args.secret).run(host="127.0.0.1", port=args.port)
