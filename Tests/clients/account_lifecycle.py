#!/usr/bin/env python3
"""An account's whole life, walked by a client written from PROTOCOL.md alone.

Usage: account_lifecycle.py BASE_URL   (e.g. http://127.0.0.1:8080)

Uses httpx (Debian: python3-httpx) and nothing of Ferry's. Every status, error code
and field named in PROTOCOL.md's Accounts section is checked; the first mismatch
stops the walk with a message naming the step, and the exit status is 1. Exit 0
means every step answered as the protocol says.
"""

import sys
import uuid

import httpx

STEP = "start"


class Mismatch(Exception):
    pass


def step(name):
    global STEP
    STEP = name
    print(f"- {name}", flush=True)


def fail(message, response=None):
    detail = ""
    if response is not None:
        detail = f"\n  got {response.status_code} {response.text!r}"
    raise Mismatch(f"step '{STEP}': {message}{detail}")


def expect_status(response, status):
    if response.status_code != status:
        fail(f"expected status {status}", response)


def body(response):
    try:
        value = response.json()
    except ValueError:
        fail("the body is not JSON", response)
    if not isinstance(value, dict):
        fail("the body is not a JSON object", response)
    if not response.headers.get("content-type", "").startswith("application/json"):
        fail("Content-Type is not application/json", response)
    return value


def expect_error(response, status, code):
    """PROTOCOL: {"error": {"code", "message", "retryable"}} with the status of its code."""
    expect_status(response, status)
    error = body(response).get("error")
    if not isinstance(error, dict):
        fail("no error object", response)
    if error.get("code") != code:
        fail(f"expected error code {code!r}", response)
    if not isinstance(error.get("message"), str) or not error["message"]:
        fail("the error has no message", response)
    retryable = status >= 500 or status == 429
    if error.get("retryable") is not retryable:
        fail(f"expected retryable {retryable}", response)


def expect_keys(name, value, keys, response):
    # Every field PROTOCOL.md names; "responses may grow new fields", so others are allowed.
    if not isinstance(value, dict) or not set(keys) <= set(value):
        fail(f"{name} must have the fields {sorted(keys)}", response)


def expect_user(response, user_id=None, anonymous=True, email=None):
    user = body(response).get("user")
    expect_keys("user", user, ["id", "is_anonymous", "email"], response)
    try:
        uuid.UUID(user["id"])
    except (TypeError, ValueError):
        fail("user.id is not a UUID string", response)
    if user_id is not None and user["id"] != user_id:
        fail(f"expected user.id {user_id}", response)
    if user["is_anonymous"] is not anonymous:
        fail(f"expected user.is_anonymous {anonymous}", response)
    if user["email"] != email:
        fail(f"expected user.email {email!r}", response)
    return user


def expect_session(response):
    session = body(response).get("session")
    expect_keys("session", session, ["access_token", "refresh_token", "token_type", "expires_in"], response)
    if not isinstance(session["access_token"], str) or session["access_token"].count(".") != 2:
        fail("session.access_token is not a JWT", response)
    if not isinstance(session["refresh_token"], str) or not session["refresh_token"]:
        fail("session.refresh_token is empty", response)
    if session["token_type"] != "bearer":
        fail('session.token_type is not "bearer"', response)
    if type(session["expires_in"]) is not int or session["expires_in"] <= 0:
        fail("session.expires_in is not a positive whole number of seconds", response)
    return session


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def walk(base_url):
    http = httpx.Client(base_url=base_url, timeout=15.0)
    device_a = str(uuid.uuid4())
    device_b = str(uuid.uuid4())
    email = f"walker-{uuid.uuid4().hex[:8]}@example.com"
    password = "a long enough password"

    step("anonymous sign-up on device A: 201 {user, session}")
    response = http.post("/v1/auth/anonymous", json={"device_id": device_a})
    expect_status(response, 201)
    if not {"user", "session"} <= set(body(response)):
        fail("the answer must have user and session", response)
    user_id = expect_user(response)["id"]
    session_a = expect_session(response)

    step("GET /v1/auth/user with device A's token: the same anonymous user")
    response = http.get("/v1/auth/user", headers=bearer(session_a["access_token"]))
    expect_status(response, 200)
    expect_user(response, user_id, anonymous=True)

    step("link an email and password: same id, no longer anonymous")
    response = http.post(
        "/v1/auth/link", headers=bearer(session_a["access_token"]), json={"email": email, "password": password}
    )
    expect_status(response, 200)
    expect_user(response, user_id, anonymous=False, email=email)

    step("sign in from device B with the right password: 200, reset false")
    response = http.post("/v1/auth/signin", json={"email": email, "password": password, "device_id": device_b})
    expect_status(response, 200)
    if body(response).get("reset") is not False:
        fail("expected reset: false", response)
    expect_user(response, user_id, anonymous=False, email=email)
    session_b = expect_session(response)

    step("both devices' access tokens work")
    for name, session in (("A", session_a), ("B", session_b)):
        response = http.get("/v1/auth/user", headers=bearer(session["access_token"]))
        expect_status(response, 200)
        expect_user(response, user_id, anonymous=False, email=email)

    step("sign in with a wrong password: 401 invalid_credentials")
    response = http.post(
        "/v1/auth/signin", json={"email": email, "password": "not the password", "device_id": device_b}
    )
    expect_error(response, 401, "invalid_credentials")

    step("refresh device B: a new pair of tokens")
    response = http.post("/v1/auth/refresh", json={"refresh_token": session_b["refresh_token"]})
    expect_status(response, 200)
    expect_user(response, user_id, anonymous=False, email=email)
    rotated = expect_session(response)
    if rotated["refresh_token"] == session_b["refresh_token"]:
        fail("the refresh token did not rotate", response)

    step("the new refresh token works")
    response = http.post("/v1/auth/refresh", json={"refresh_token": rotated["refresh_token"]})
    expect_status(response, 200)
    latest = expect_session(response)

    step("the first refresh token again: 401 refresh_token_reused")
    response = http.post("/v1/auth/refresh", json={"refresh_token": session_b["refresh_token"]})
    expect_error(response, 401, "refresh_token_reused")

    step("the reused session's access token: 401 session_revoked")
    response = http.get("/v1/auth/user", headers=bearer(latest["access_token"]))
    expect_error(response, 401, "session_revoked")

    step("device A still works (only B's session was revoked)")
    response = http.get("/v1/auth/user", headers=bearer(session_a["access_token"]))
    expect_status(response, 200)

    step("sign out on device A: 204")
    response = http.post("/v1/auth/signout", headers=bearer(session_a["access_token"]))
    expect_status(response, 204)
    if response.content:
        fail("a 204 has no body", response)

    step("device A's token stops working at once: 401 session_revoked")
    response = http.get("/v1/auth/user", headers=bearer(session_a["access_token"]))
    expect_error(response, 401, "session_revoked")

    step("sign in again on device A")
    response = http.post("/v1/auth/signin", json={"email": email, "password": password, "device_id": device_a})
    expect_status(response, 200)
    session_c = expect_session(response)

    step("delete the account with a wrong confirmation: 400 confirmation_required")
    for wrong in ({"confirm": "delete"}, {"confirm": "DELETE "}, {}):
        response = http.request(
            "DELETE", "/v1/account", headers=bearer(session_c["access_token"]), json=wrong
        )
        expect_error(response, 400, "confirmation_required")
    response = http.get("/v1/auth/user", headers=bearer(session_c["access_token"]))
    expect_status(response, 200)

    step("delete the account: 204")
    response = http.request(
        "DELETE", "/v1/account", headers=bearer(session_c["access_token"]), json={"confirm": "DELETE"}
    )
    expect_status(response, 204)

    step("retrying the deletion (its answer was lost): 204 again")
    response = http.request(
        "DELETE", "/v1/account", headers=bearer(session_c["access_token"]), json={"confirm": "DELETE"}
    )
    expect_status(response, 204)

    step("the deleted account's token and password no longer work")
    response = http.get("/v1/auth/user", headers=bearer(session_c["access_token"]))
    expect_error(response, 401, "session_revoked")
    response = http.post("/v1/auth/signin", json={"email": email, "password": password, "device_id": device_a})
    expect_error(response, 401, "invalid_credentials")


def main():
    if len(sys.argv) != 2:
        print("usage: account_lifecycle.py BASE_URL", file=sys.stderr)
        return 2
    try:
        walk(sys.argv[1])
    except Mismatch as mismatch:
        print(f"MISMATCH {mismatch}", file=sys.stderr)
        return 1
    except httpx.HTTPError as error:
        print(f"HTTP FAILURE at step '{STEP}': {error!r}", file=sys.stderr)
        return 1
    print("every step answered as PROTOCOL.md says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
