#!/usr/bin/env python3
"""A local webhook receiver for the README's quick start: it verifies each
request's Standard Webhooks signature with the `standardwebhooks` package (an
implementation hookline did not write) against the secrets in a hookline
secrets file, prints `verified <webhook-id> <body>` (or `REJECTED ...`) and
answers 204 (or 400).

    .venv/bin/python deploy/dev/receiver.py [--listen 127.0.0.1:8765] [--secrets FILE]

Defaults: $DEV_RECEIVER or 127.0.0.1:8765, and .cache/dev-secrets/dev (what
`make dev` writes).
"""

from __future__ import annotations

import argparse
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default=os.environ.get("DEV_RECEIVER", "127.0.0.1:8765"))
    parser.add_argument("--secrets", default=".cache/dev-secrets/dev")
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    with open(args.secrets, encoding="utf-8") as f:
        secrets = [l.strip() for l in f if l.strip() and not l.startswith("#")]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            webhook_id = headers.get("webhook-id", "-")
            for secret in secrets:
                try:
                    Webhook(secret).verify(body, headers)
                except WebhookVerificationError:
                    continue
                print(f"verified {webhook_id} {body.decode(errors='replace')}", flush=True)
                self.send_response(204)
                self.end_headers()
                return
            print(f"REJECTED {webhook_id}: no secret verifies it", flush=True)
            self.send_response(400)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer((host, int(port)), Handler)
    print(f"receiver: listening on http://{host}:{port}/", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
