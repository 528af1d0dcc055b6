#!/usr/bin/env python3
"""Serves the tasks web example for development: `make web`, or

    tsc -p clients/js && python3 clients/js/examples/tasks-web/serve.py [--port 8081]

then open http://127.0.0.1:8081/ (with `ferry dev --example tasks` on :8080, whose CORS
defaults allow this origin). Only these files are served, read-only: this folder's
`*.html`, `*.js` and `*.css` at `/` and the compiled client's modules
(`clients/js/dist/*.js`) at `/ferry/`. Names are matched against a pattern of letters,
digits and hyphens before any path is built, so `..`, encoded slashes and other folders
are a 404. Loopback only unless --host says otherwise. Not for production: any web
server that serves these files with the right types does.
"""

import argparse
import os
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
DIST = os.path.normpath(os.path.join(HERE, "..", "..", "dist"))
PAGE = re.compile(r"^/([a-z0-9-]+\.(html|js|css))$")
CLIENT = re.compile(r"^/ferry/([a-z0-9-]+\.js)$")
TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8"}


def resolve(path):
    """The file for the URL path `path`, or None: only the names the patterns allow."""
    path = urlsplit(path).path
    if path == "/":
        path = "/index.html"
    match = CLIENT.match(path)
    if match:
        return os.path.join(DIST, match.group(1))
    match = PAGE.match(path)
    if match:
        return os.path.join(HERE, match.group(1))
    return None


class Handler(BaseHTTPRequestHandler):
    quiet = False

    def do_GET(self):
        self.answer(body=True)

    def do_HEAD(self):
        self.answer(body=False)

    def answer(self, body):
        file = resolve(self.path)
        try:
            with open(file, "rb") as handle:
                data = handle.read()
        except (TypeError, OSError):
            data = None
        if data is None:
            data = b"not found\n"
            self.send_response(404)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
        else:
            self.send_response(200)
            self.send_header("Content-Type", TYPES[file.rsplit(".", 1)[1]])
        # Always revalidated: the service worker's cache is the offline copy, not the HTTP cache's.
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format, *args):
        if not self.quiet:
            sys.stderr.write("tasks-web: " + (format % args) + "\n")


def make_server(port, host="127.0.0.1", quiet=False):
    """A server on (host, port) (port 0: a free one, in `server.server_address`); call serve_forever."""
    handler = type("QuietHandler" if quiet else "Handler", (Handler,), {"quiet": quiet})
    return ThreadingHTTPServer((host, port), handler)


def main():
    parser = argparse.ArgumentParser(description="serve the tasks web example")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    arguments = parser.parse_args()
    if not os.path.exists(os.path.join(DIST, "index.js")):
        sys.exit(f"no {DIST}/index.js: build the client first (tsc -p clients/js)")
    server = make_server(arguments.port, arguments.host)
    print(f"tasks web example: http://{arguments.host}:{server.server_address[1]}/ (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    server.server_close()


if __name__ == "__main__":
    main()
