#!/usr/bin/env python3
"""Two devices of one user, a push and a cue, walked by a client written from
PROTOCOL.md alone.

Usage: stream_cues.py BASE_URL TRANSPORT   (TRANSPORT: websocket or sse)

Uses httpx (Debian: python3-httpx) and websockets (python3-websockets) and nothing
of Ferry's. Device A and device B belong to one user (A signs up, links an email,
B signs in). Both open a stream; A pushes a task; B's stream must get a cue naming
the table, and B's pull must return the row; A's own stream gets the cue with
`origin` = A. The first mismatch exits 1 with a message naming the step; exit 0
means every step answered as the protocol says.
"""

import asyncio
import json
import sys
import uuid

import httpx
import websockets

STEP = "start"
TIMEOUT = 10


class Mismatch(Exception):
    pass


def step(name):
    global STEP
    STEP = name
    print(f"- {name}", flush=True)


def fail(message):
    raise Mismatch(f"step '{STEP}': {message}")


def expect_status(response, status):
    if response.status_code != status:
        fail(f"expected status {status}, got {response.status_code} {response.text!r}")


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


class WebSocketStream:
    """PROTOCOL.md's messages over `GET /v1/stream`."""

    def __init__(self, base_url, token):
        self.url = base_url.replace("http://", "ws://") + "/v1/stream"
        self.token = token

    async def __aenter__(self):
        self.socket = await websockets.connect(self.url, extra_headers=bearer(self.token))
        return self

    async def __aexit__(self, *error):
        await self.socket.close()

    async def message(self):
        text = await asyncio.wait_for(self.socket.recv(), TIMEOUT)
        if not isinstance(text, str):
            fail(f"expected a text frame, got {text!r}")
        return json.loads(text)


class EventStream:
    """The same messages over `GET /v1/events` (Server-Sent Events), with httpx streaming."""

    def __init__(self, http, token):
        self.http = http
        self.token = token

    async def __aenter__(self):
        self.context = self.http.stream("GET", "/v1/events", headers=bearer(self.token), timeout=None)
        response = await self.context.__aenter__()
        expect_status(response, 200)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            fail(f"Content-Type is {response.headers.get('content-type')!r}, not text/event-stream")
        self.lines = response.aiter_lines()
        return self

    async def __aexit__(self, *error):
        await self.context.__aexit__(*error)

    async def message(self):
        event, data = None, []
        while True:
            # Older httpx keeps the line ending; newer strips it.
            line = (await asyncio.wait_for(self.lines.__anext__(), TIMEOUT)).rstrip("\r\n")
            if line == "":
                if data:
                    message = json.loads("\n".join(data))
                    if event != message.get("type"):
                        fail(f"event {event!r} carries a {message.get('type')!r} message")
                    return message
                event, data = None, []
            elif line.startswith(":") or line.startswith("retry:"):
                continue
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())


async def next_cue(stream):
    for _ in range(100):
        message = await stream.message()
        if message.get("type") == "cue":
            return message
    fail("no cue in 100 messages")


async def walk(base_url, transport):
    async with httpx.AsyncClient(base_url=base_url, timeout=TIMEOUT) as http:
        device_a, device_b = str(uuid.uuid4()), str(uuid.uuid4())
        email, password = f"streams-{uuid.uuid4().hex[:12]}@example.com", "correct horse battery"

        step("device A signs up and links an email; device B signs in to the same user")
        response = await http.post("/v1/auth/anonymous", json={"device_id": device_a})
        expect_status(response, 201)
        user_id = response.json()["user"]["id"]
        token_a = response.json()["session"]["access_token"]
        response = await http.post(
            "/v1/auth/link", headers=bearer(token_a), json={"email": email, "password": password}
        )
        expect_status(response, 200)
        response = await http.post(
            "/v1/auth/signin", json={"email": email, "password": password, "device_id": device_b}
        )
        expect_status(response, 200)
        token_b = response.json()["session"]["access_token"]

        def open_stream(token):
            return WebSocketStream(base_url, token) if transport == "websocket" else EventStream(http, token)

        async with open_stream(token_a) as stream_a, open_stream(token_b) as stream_b:
            step("each stream says hello first, naming its user and device")
            for stream, device in ((stream_a, device_a), (stream_b, device_b)):
                hello = await stream.message()
                if hello.get("type") != "hello":
                    fail(f"the first message is {hello!r}, not hello")
                if hello.get("user_id") != user_id or hello.get("device_id") != device:
                    fail(f"hello names {hello.get('user_id')}/{hello.get('device_id')}, not {user_id}/{device}")
                if not isinstance(hello.get("heartbeat_ms"), int) or hello["heartbeat_ms"] <= 0:
                    fail(f"hello has no positive heartbeat_ms: {hello!r}")

            step("device B pulls once after opening (cues are not replayed)")
            response = await http.get("/v1/pull", headers=bearer(token_b))
            expect_status(response, 200)
            cursor = response.json()["cursor"]

            step("device A pushes a task")
            task_id = f"t-{uuid.uuid4().hex[:8]}"
            response = await http.post(
                "/v1/push",
                headers=bearer(token_a),
                json={"mutations": [{"id": 1, "table": "tasks", "op": "upsert", "row": {"id": task_id, "title": "milk"}}]},
            )
            expect_status(response, 200)
            if response.json()["results"][0]["status"] != "applied":
                fail(f"the push was not applied: {response.text}")

            step("device B's stream gets a cue naming the table, from device A")
            cue = await next_cue(stream_b)
            if "tasks" not in cue.get("tables", []):
                fail(f"the cue does not name tasks: {cue!r}")
            if cue.get("origin") != device_a:
                fail(f"the cue's origin is {cue.get('origin')!r}, not device A {device_a}")

            step("device B pulls with its cursor and sees the row")
            response = await http.get("/v1/pull", params={"cursor": cursor}, headers=bearer(token_b))
            expect_status(response, 200)
            upserts = response.json()["changes"].get("tasks", {}).get("upserts", [])
            if [row["id"] for row in upserts] != [task_id]:
                fail(f"the pull returned {upserts!r}, not the pushed task")

            step("device A's own stream gets the echo, origin A, so it can skip it")
            cue = await next_cue(stream_a)
            if cue.get("origin") != device_a or "tasks" not in cue.get("tables", []):
                fail(f"A's cue is {cue!r}")
    print("every step answered as PROTOCOL.md says", flush=True)


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("websocket", "sse"):
        print(__doc__)
        return 2
    try:
        asyncio.run(walk(sys.argv[1], sys.argv[2]))
    except Mismatch as mismatch:
        print(f"MISMATCH {mismatch}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
