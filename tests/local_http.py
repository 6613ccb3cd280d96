"""Tiny JSON HTTP services on 127.0.0.1 for tests of tool bindings and OpenAI-compatible clients.

``JsonHandler`` reads a JSON body and answers JSON quietly; ``serving`` runs a handler class on a free
port in a daemon thread and always shuts the server down.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Iterator


class JsonHandler(BaseHTTPRequestHandler):
    """Base for test services: ``body()`` parses the request, ``send_json`` answers; no access log."""

    def body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

    def send_json(self, code: int, payload) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out first (timeout tests)
            pass

    def log_message(self, *args):
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """Serve ``handler`` on 127.0.0.1 at a free port; yields the port."""
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
