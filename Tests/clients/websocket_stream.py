"""Talks to a Ferry test WebSocket stream with the `websockets` library, as an
independent client: text messages both ways, pings both ways, and a close code the
server chooses.

The test server echoes a text message, answers `heartbeat` with `{"alive": …}` after
sending a ping of its own, and closes on `close:<code>:<reason>`.

Usage: websocket_stream.py <ws:// url>
"""

import asyncio
import json
import sys

import websockets


async def main(url: str) -> None:
    async with websockets.connect(url, open_timeout=10, close_timeout=5) as ws:
        auth = json.dumps({"type": "auth", "access_token": "token-from-python"})
        await ws.send(auth)
        echoed = await asyncio.wait_for(ws.recv(), 5)
        assert echoed == auth, echoed

        pong = await ws.ping(b"are you there")
        await asyncio.wait_for(pong, 5)

        for _ in range(2):
            # The server pings first; websockets answers, so the next heartbeat is alive too.
            await ws.send("heartbeat")
            answer = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert answer == {"alive": True}, answer

        await ws.send("close:4001:token_expired")
        try:
            message = await asyncio.wait_for(ws.recv(), 5)
            raise AssertionError(f"expected the close, got {message!r}")
        except websockets.exceptions.ConnectionClosed:
            pass
        await asyncio.wait_for(ws.wait_closed(), 5)
        assert ws.close_code == 4001, ws.close_code
        assert ws.close_reason == "token_expired", ws.close_reason
    print("the WebSocket stream spoke RFC 6455")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
