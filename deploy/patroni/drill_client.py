#!/usr/bin/env python3
"""One round of deploy/failover-drill.sh: writers, streams and probes against two
gateways while the Patroni primary is failed over, then the count of what was lost.

Each device (an anonymous user) pushes one lww mutation at a time to drill_writes and
re-sends the same batch, same mutation id, until a gateway answers it; an answer of
`applied` or `duplicate` is an acknowledged push. Each device also holds an SSE stream and
pulls on every cue, keeping its cursor (a `409 cursor_expired` is counted). Threads poll
each gateway's /readyz and each node's Patroni /primary every 50 ms. After warming up the
round runs the trigger (a shell command: patronictl switchover, or kill -9 of the
primary's postgres), waits until writes, streams and readiness are back (bounded), stops
the writers (each finishes the mutation it is sending, bounded) and compares every
acknowledged mutation with public.drill_applications, which counts each time a push
wrote a row: 0 is a lost push, 2 one applied twice.

Usage: drill_client.py CONFIG.json RESULT.json   (the drill script writes CONFIG)
"""
import json, subprocess, sys, threading, time, uuid

import httpx

config = json.load(open(sys.argv[1]))
result_path = sys.argv[2]
gateways = config["gateways"]            # base URLs of the gateways
patroni = config["patroni"]              # node name -> REST API base URL
devices_count = config.get("devices", 4)
warmup = config.get("warmup_seconds", 3.0)
recover_limit = config.get("recover_seconds", 60.0)
push_interval = config.get("push_interval_seconds", 0.05)
max_mutations = config.get("max_mutations_per_device", 5000)

stop = threading.Event()
start = time.monotonic()


def clock():
    return time.monotonic() - start


def sign_up(index):
    device = str(uuid.uuid4())
    response = httpx.post(gateways[index % len(gateways)] + "/v1/auth/anonymous",
                          json={"device_id": device}, timeout=10)
    response.raise_for_status()
    answer = response.json()
    return {"index": index, "device": device, "uid": answer["user"]["id"],
            "token": answer["session"]["access_token"], "gateway": gateways[index % len(gateways)],
            "acked": {}, "statuses": {}, "failures": [], "cues": [], "opens": [], "drops": 0,
            "expired": 0, "pull_errors": 0, "unanswered": None}


def writer(device):
    """Pushes mutation 1, 2, … one at a time; each is re-sent unchanged until answered."""
    headers = {"Authorization": "Bearer " + device["token"]}
    with httpx.Client(timeout=httpx.Timeout(5.0, connect=2.0), headers=headers) as client:
        for mutation in range(1, max_mutations + 1):
            if stop.is_set():
                return
            body = {"mutations": [{"id": mutation, "table": "drill_writes", "op": "upsert",
                                   "row": {"id": "m%d" % mutation, "payload": "%s:%d" % (device["device"], mutation)}}]}
            # Finish the mutation being sent, even after stop, for at most 20 s more.
            while True:
                if stop.is_set() and clock() > stop_time + 20:
                    device["unanswered"] = mutation
                    return
                wait = 0.1
                try:
                    response = client.post(device["gateway"] + "/v1/push", json=body)
                    if response.status_code == 200:
                        status = response.json()["results"][0]["status"]
                        device["statuses"][status] = device["statuses"].get(status, 0) + 1
                        if status in ("applied", "duplicate"):
                            device["acked"][mutation] = clock()
                        break
                    device["failures"].append((clock(), response.status_code))
                    if response.status_code < 500 and response.status_code != 429:
                        break  # final: counted, never retried forever
                    wait = max(wait, float(response.headers.get("Retry-After", 0)))
                except httpx.HTTPError as error:
                    device["failures"].append((clock(), type(error).__name__))
                time.sleep(wait)
            time.sleep(push_interval)


def pull(client, device, state):
    """Pulls until has_more is false; a 409 drops the cursor, as a client does."""
    for _ in range(50):
        params = {"cursor": state["cursor"]} if state["cursor"] else {}
        try:
            response = client.get(device["gateway"] + "/v1/pull", params=params)
        except httpx.HTTPError:
            device["pull_errors"] += 1
            return
        if response.status_code == 409:
            device["expired"] += 1
            state["cursor"] = None
            continue
        if response.status_code != 200:
            device["pull_errors"] += 1
            return
        answer = response.json()
        state["cursor"] = answer["cursor"]
        if not answer["has_more"]:
            return


def streamer(device):
    """Holds an SSE stream, reconnecting when it ends; pulls on hello and on every cue."""
    headers = {"Authorization": "Bearer " + device["token"]}
    state = {"cursor": None}
    timeout = httpx.Timeout(5.0, connect=2.0, read=40.0)
    with httpx.Client(timeout=timeout, headers=headers) as client:
        while not stop.is_set():
            try:
                with client.stream("GET", device["gateway"] + "/v1/events") as response:
                    if response.status_code != 200:
                        device["drops"] += 1
                        time.sleep(0.2)
                        continue
                    device["opens"].append(clock())
                    event = None
                    for line in response.iter_lines():
                        if stop.is_set():
                            return
                        if line.startswith("event:"):
                            event = line[6:].strip()
                        elif line.startswith("data:") and event in ("hello", "cue"):
                            if event == "cue":
                                device["cues"].append(clock())
                            pull(client, device, state)
                        elif line.startswith("data:") and event == "closed":
                            break
            except httpx.HTTPError:
                pass
            if not stop.is_set():
                device["drops"] += 1
                time.sleep(0.2)


def poll(url, samples):
    """Appends (time, ok) every 50 ms while the round runs."""
    with httpx.Client(timeout=1.0) as client:
        while not stop.is_set():
            try:
                ok = client.get(url).status_code == 200
            except httpx.HTTPError:
                ok = False
            samples.append((clock(), ok))
            time.sleep(0.05)


def primary_at(samples, since, old):
    """When some node answered /primary again after `old` (the primary before) stopped."""
    events = sorted((t, name, ok) for name, times in samples.items() for t, ok in times if t >= since)
    lost = None
    for t, name, ok in events:
        if lost is None and name == old and not ok:
            lost = t
        elif lost is not None and ok:
            return t
    return None


def unready_spans(samples, since):
    """The spans, after `since`, from each failed sample to the next good one (seconds
    after `since`, rounded); a span still open at the end ends there."""
    spans, down_since = [], None
    for t, ok in samples:
        if t < since:
            continue
        if not ok and down_since is None:
            down_since = t
        elif ok and down_since is not None:
            spans.append((round(down_since - since, 2), round(t - since, 2)))
            down_since = None
    if down_since is not None:
        spans.append((round(down_since - since, 2), round(clock() - since, 2)))
    return spans


def back_after(device, since):
    """When this device's pushes were acknowledged again after its first failure since `since`."""
    failures = [t for t, _ in device["failures"] if t >= since]
    if not failures:
        return since
    later = [t for t in device["acked"].values() if t > failures[0]]
    return min(later) if later else None


def applications(uids):
    """(uid, id) -> how many times a push wrote that row, read on the primary."""
    sql = ("select user_id, id, count(*) from public.drill_applications where user_id = any(array[%s]::uuid[]) "
           "group by 1, 2" % ",".join("'%s'" % u for u in uids))
    out = subprocess.run(["psql", "-X", "-At", "-F", ",", "-v", "ON_ERROR_STOP=1", config["owner_url"], "-c", sql],
                         capture_output=True, text=True, check=True).stdout
    counts = {}
    for line in out.splitlines():
        uid, row_id, count = line.split(",")
        counts[(uid, row_id)] = int(count)
    return counts


devices = [sign_up(i) for i in range(devices_count)]
ready = {url: [] for url in gateways}
primary = {name: [] for name in patroni}
threads = [threading.Thread(target=writer, args=(d,)) for d in devices]
daemons = [threading.Thread(target=streamer, args=(d,), daemon=True) for d in devices]
daemons += [threading.Thread(target=poll, args=(url + "/readyz", ready[url]), daemon=True) for url in gateways]
daemons += [threading.Thread(target=poll, args=(url + "/primary", primary[name]), daemon=True)
            for name, url in patroni.items()]
stop_time = float("inf")
for thread in threads + daemons:
    thread.start()

time.sleep(warmup)
old_primary = next((n for n, s in primary.items() if s and s[-1][1]), None)
trigger_at = clock()
trigger = subprocess.run(config["trigger"], shell=True, capture_output=True, text=True)

# Wait (bounded) until a primary is back, every writer was acknowledged again, every stream
# had a cue after that and every gateway is ready; then a second more of load.
deadline = trigger_at + recover_limit
while clock() < deadline:
    backs = [back_after(d, trigger_at) for d in devices]
    if (primary_at(primary, trigger_at, old_primary) is not None and all(b is not None for b in backs)
            and all(any(c > b for c in d["cues"]) for d, b in zip(devices, backs))
            and all(s and s[-1][1] for s in ready.values())):
        break
    time.sleep(0.1)
time.sleep(1.0)
stop_time = clock()
stop.set()
for thread in threads:
    thread.join(timeout=30)

backs = [back_after(d, trigger_at) for d in devices]
counts = applications([d["uid"] for d in devices])
acked = sum(len(d["acked"]) for d in devices)
lost = [(d["uid"], m) for d in devices for m in d["acked"] if counts.get((d["uid"], "m%d" % m), 0) == 0]
twice = [key for key, count in counts.items() if count > 1]
new_primary = primary_at(primary, trigger_at, old_primary)
result = {
    "trigger": config["trigger_name"],
    "trigger_exit": trigger.returncode,
    "trigger_output": (trigger.stdout + trigger.stderr)[-400:],
    "old_primary": old_primary,
    "new_primary": next((n for n, s in primary.items() if s and s[-1][1]), None),
    "seconds_to_new_primary": None if new_primary is None else round(new_primary - trigger_at, 2),
    "seconds_writes_back": None if None in backs else round(max(backs) - trigger_at, 2),
    "seconds_unready": {url: round(sum(b - a for a, b in unready_spans(s, trigger_at)), 2)
                        for url, s in ready.items()},
    "unready_spans": {url: unready_spans(s, trigger_at) for url, s in ready.items()},
    "acknowledged": acked,
    "failed_attempts": sum(len(d["failures"]) for d in devices),
    "answers": {k: sum(d["statuses"].get(k, 0) for d in devices) for k in ("applied", "duplicate", "rejected")},
    "lost": len(lost),
    "applied_twice": len(twice),
    "unanswered_at_stop": sum(1 for d in devices if d["unanswered"] is not None),
    "streams": len(devices),
    "streams_cued_after_recovery": sum(1 for d, b in zip(devices, backs)
                                       if b is not None and any(c > b for c in d["cues"])),
    "stream_reconnects": sum(d["drops"] for d in devices),
    "cursors_expired": sum(d["expired"] for d in devices),
}
json.dump(result, open(result_path, "w"), indent=1)
print("%s %s -> %s: new primary %ss, writes back %ss, unready %s s, %d acknowledged, lost %d, "
      "applied twice %d, streams cued after %d/%d, cursors expired %d" % (
          result["trigger"], old_primary, result["new_primary"], result["seconds_to_new_primary"],
          result["seconds_writes_back"], list(result["seconds_unready"].values()), acked, len(lost), len(twice),
          result["streams_cued_after_recovery"], len(devices), result["cursors_expired"]))
if trigger.returncode != 0:
    print("the trigger failed: " + result["trigger_output"])
sys.exit(0 if result["lost"] == 0 and result["applied_twice"] == 0 else 1)
