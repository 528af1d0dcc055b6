"""Reads a Ferry Server-Sent Events stream with httpx, written from PROTOCOL.md's
Streams section: events as `event:` and `data:` lines, `: ping` comments, a `retry:`
hint, and a last `closed` event before the connection ends.

Usage: event_stream.py <url of a stream that sends hello, a ping, a cue, then closes 4001>
"""

import json
import sys

import httpx


def main() -> None:
    url = sys.argv[1]
    lines = []
    with httpx.Client(timeout=10) as client:
        with client.stream("GET", url, headers={"Accept": "text/event-stream"}) as response:
            assert response.status_code == 200, response.status_code
            assert response.headers["content-type"] == "text/event-stream", response.headers
            assert response.headers["cache-control"] == "no-store", response.headers
            assert response.headers["x-accel-buffering"] == "no", response.headers
            for line in response.iter_lines():
                # httpx before 0.24 keeps the line ending.
                lines.append(line.rstrip("\r\n"))
    # The stream ended (the server closed the connection) after the closed event.
    expected_start = ["retry: 1500", "", "event: hello"]
    assert lines[:3] == expected_start, lines
    assert json.loads(lines[3].removeprefix("data: ")) == {"type": "hello", "heartbeat_ms": 25000}, lines
    assert lines[4:8] == ["", ": ping", "", "event: cue"], lines
    assert json.loads(lines[8].removeprefix("data: ")) == {"type": "cue", "tables": ["a", "b"]}, lines
    assert lines[9:11] == ["", "event: closed"], lines
    assert json.loads(lines[11].removeprefix("data: ")) == {"code": 4001, "reason": "token_expired"}, lines
    assert lines[12:] in ([], [""]), lines
    print("the event stream read as PROTOCOL.md says")


if __name__ == "__main__":
    main()
