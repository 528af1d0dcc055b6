"""The Python half of bench/lib.bash: what the scripts' set-up steps (a `python3 -`
here-document each, run by lib.bash's `set_up_with_python`) share. They reach the gateway
at SETUP_BASE, the database as its owner at OWNER_URL, and write under TMP."""
import base64, json, os, subprocess, urllib.request, uuid
from concurrent.futures import ThreadPoolExecutor

env = os.environ
base, tmp, owner = env["SETUP_BASE"], env["TMP"], env["OWNER_URL"]


def call(method, path, token=None, body=None):
    """The JSON answer to one request to the gateway; an error status raises."""
    request = urllib.request.Request(base + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **({"Authorization": "Bearer " + token} if token else {})})
    with urllib.request.urlopen(request) as response:
        return json.load(response)


def claims(token):
    """The claims of an access token (its payload, unverified)."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def sign_up(_=None):
    """A new anonymous user on a new device: its token, user, device and session ids, and
    its refresh token."""
    device = str(uuid.uuid4())
    answer = call("POST", "/v1/auth/anonymous", body={"device_id": device})
    token = answer["session"]["access_token"]
    token_claims = claims(token)
    assert token_claims["did"] == device and token_claims["sub"] == answer["user"]["id"], token_claims
    return {"token": token, "uid": token_claims["sub"], "did": device, "sid": token_claims["sid"],
            "refresh": answer["session"]["refresh_token"]}


def sign_up_many(count):
    """`count` anonymous users (sign_up), eight requests at a time."""
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(sign_up, range(count)))


def psql(sql):
    """Runs `sql` as the owner; any error stops the set-up."""
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", owner], input=sql, text=True, check=True)


def uuid_list(users):
    """The users' ids as SQL string literals, comma-separated (for an `array[…]::uuid[]`)."""
    return ",".join("'%s'" % u["uid"] for u in users)
