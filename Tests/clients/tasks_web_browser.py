"""The tasks web example (clients/js/examples/tasks-web) in two real browsers.

Run by TasksWebBrowserTests (Swift) against a migrated database with the tasks example:
this script starts `ferry serve` (the built binary) on a loopback port with the page's
origin in --cors-origins, serves the page with the example's own serve.py, and drives
two headless Chromium profiles (Debian's chromium and chromium-driver through Debian's
python3-selenium), two devices of one user:

  1. each profile opens the page: an anonymous account, the service worker installed;
  2. A adds, edits, completes and deletes tasks, then creates an account (link);
  3. B, holding a task of its own, signs in: the keep-device / keep-cloud choice is
     shown, "keep the account's" drops B's task and loads A's;
  4. a task added on A appears on B without a reload (the stream's cue);
  5. with the gateway and the web server stopped, both edit, then reload: the page (from
     the service worker's cache) and the data (IndexedDB, pending writes included) are
     there;
  6. both restarted: both drain and converge on the same list;
  7. A signs out, adds a task, signs in again and keeps this device's tasks: the account
     holds only that task, and B sees the change by its cue.

A screenshot of each step is saved under --artifacts. Every wait is bounded; the whole
run ends after --deadline seconds. Traffic goes to 127.0.0.1 only (the host resolver
maps every other name to nothing, and Chromium's background services are off). Exit
status 0 and "tasks-web: every step passed" when every check held; otherwise a
traceback and a screenshot named failure-*.png.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as error:
    sys.exit(f"tasks-web: python3-selenium is missing ({error}): make deps installs it")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "clients", "js", "examples", "tasks-web"))
import serve  # noqa: E402  (the example's own server)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 30  # seconds, for any one condition


def log(text):
    print(f"tasks-web: {text}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    """`ferry serve` as a child process, stopped and started again on the same port."""

    def __init__(self, ferry, database_url, secret, port, origin, log_file):
        self.command = [
            ferry, "serve", "--database-url", database_url, "--jwt-secret", secret,
            "--listen", f"127.0.0.1:{port}", "--cors-origins", origin, "--threads", "2",
            "--shutdown-timeout", "2",
        ]
        self.url = f"http://127.0.0.1:{port}"
        self.log_file = log_file
        self.process = None

    def start(self):
        with open(self.log_file, "ab") as output:
            self.process = subprocess.Popen(self.command, stdout=output, stderr=output, stdin=subprocess.DEVNULL)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"ferry serve exited with {self.process.returncode} (log: {self.log_file})")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"ferry serve not ready within 60 s (log: {self.log_file})")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None


class WebServer:
    """The example's serve.py in a thread, stopped and started again on the same port."""

    def __init__(self, port):
        self.port = port
        self.server = None

    def start(self):
        self.server = serve.make_server(self.port, quiet=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
        self.server = None


def check_web_server(base):
    """The page and the client are served with the right types; nothing else is."""

    def get(path):
        try:
            with urllib.request.urlopen(base + path, timeout=5) as answer:
                return answer.status, answer.headers.get("Content-Type", "")
        except urllib.error.HTTPError as error:
            return error.code, ""

    assert get("/")[0] == 200, get("/")
    assert get("/ferry/index.js") == (200, "text/javascript; charset=utf-8"), get("/ferry/index.js")
    for path in ["/../Makefile", "/ferry/../../../Makefile", "/%2e%2e/%2e%2e/Makefile", "/ferry/..%2f..%2fpackage.json",
                 "/serve.py", "/ferry/index.d.ts", "//etc/passwd", "/ferry/%2e%2e/client.ts"]:
        # http.client sends the path as given (no normalising of dot segments).
        status = get(path)[0]
        assert status == 404, f"{path}: {status}, expected 404"


class Device:
    """One Chromium profile (its own user-data-dir: its own IndexedDB, caches and worker)."""

    def __init__(self, name, page, artifacts, profile):
        self.name = name
        self.page = page
        self.artifacts = artifacts
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in [
            "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
            f"--user-data-dir={profile}", "--window-size=900,1000", "--no-first-run",
            "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-default-apps", "--disable-extensions", "--no-pings",
            "--disable-domain-reliability", "--disable-client-side-phishing-detection",
            "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication",
            "--metrics-recording-only", "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        ]:
            options.add_argument(argument)
        # Explicit paths: Selenium never looks for (or downloads) a driver itself.
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.set_page_load_timeout(WAIT)
        self.driver.set_script_timeout(WAIT)

    def quit(self):
        try:
            self.driver.quit()
        except Exception as error:  # noqa: BLE001 (best effort at the end)
            log(f"{self.name}: quit: {error}")

    def shot(self, step):
        path = os.path.join(self.artifacts, f"{step}-{self.name}.png")
        self.driver.save_screenshot(path)
        log(f"screenshot {path}")

    def js(self, script, *arguments):
        return self.driver.execute_script(script, *arguments)

    def wait(self, what, predicate, seconds=WAIT):
        try:
            return WebDriverWait(self.driver, seconds, poll_frequency=0.2).until(lambda _: predicate())
        except TimeoutException:
            raise AssertionError(f"{self.name}: timed out after {seconds} s waiting for {what}; state: {self.state()}")

    def open(self):
        self.driver.get(self.page)
        self.wait("the page ready", lambda: self.js("return document.body.dataset.ready") == "yes")

    def reload(self):
        self.js("window.__sameDocument = undefined")
        self.driver.refresh()
        self.wait("the page ready after the reload", lambda: self.js("return document.body.dataset.ready") == "yes")

    def tasks(self):
        return self.js(
            "return [...document.querySelectorAll('#tasks .task')].map((li) => ({ id: li.dataset.id,"
            " title: li.querySelector('.title')?.textContent ?? null, done: li.querySelector('.toggle').checked }))"
        )

    def titles(self):
        return [task["title"] for task in self.tasks()]

    def pending(self):
        return int(self.js("return document.getElementById('status-pending').dataset.count"))

    def connected(self):
        return self.js("return document.getElementById('status-connection').textContent") == "Connected"

    def state(self):
        try:
            return json.dumps({
                "tasks": self.tasks(), "pending": self.pending(), "connected": self.connected(),
                "account": self.js("return document.getElementById('account-user').textContent"),
                "message": self.js("return document.getElementById('message').textContent"),
            })
        except Exception as error:  # noqa: BLE001 (for a failure's message only)
            return f"(unreadable: {error})"

    def synced(self, what="synced and connected"):
        self.wait(what, lambda: self.pending() == 0 and self.connected())

    def act(self, what, action):
        """Runs `action` (finding its elements afresh each time): a sync may draw the list
        again between finding an element and using it. At most five tries."""
        for attempt in range(5):
            try:
                return action()
            except StaleElementReferenceException:
                if attempt == 4:
                    raise AssertionError(f"{self.name}: {what}: the element kept going stale")
                time.sleep(0.2)

    def click(self, css):
        self.act(f"click {css}", lambda: self.driver.find_element(By.CSS_SELECTOR, css).click())

    def type(self, css, text):
        def typing():
            element = self.driver.find_element(By.CSS_SELECTOR, css)
            element.clear()
            element.send_keys(text)
        self.act(f"type into {css}", typing)

    def task_css(self, title):
        """The CSS selector of the task titled `title` (by its id, which stays across redraws)."""
        for task in self.tasks():
            if task["title"] == title:
                return f'#tasks .task[data-id="{task["id"]}"]'
        raise AssertionError(f"{self.name}: no task {title!r} in {self.titles()}")

    def add(self, title):
        self.type("#new-title", title)
        self.click("#add")
        self.wait(f"task {title!r} listed", lambda: title in self.titles())

    def edit(self, title, new_title):
        item = self.task_css(title)
        self.click(item + " .edit")
        self.type(item + " .edit-title", new_title)
        self.click(item + " .save")
        self.wait(f"task {title!r} renamed {new_title!r}", lambda: new_title in self.titles() and title not in self.titles())

    def complete(self, title):
        self.click(self.task_css(title) + " .toggle")
        self.wait(f"task {title!r} completed", lambda: any(t["title"] == title and t["done"] for t in self.tasks()))

    def delete(self, title):
        self.click(self.task_css(title) + " .delete")
        self.wait(f"task {title!r} gone", lambda: title not in self.titles())

    def account_form(self, email, password, button):
        self.type("#email", email)
        self.type("#password", password)
        self.click(button)

    def account(self):
        return self.js("return document.getElementById('account-user').textContent")


def same_lists(a, b):
    key = lambda device: sorted((t["title"], t["done"]) for t in device.tasks())  # noqa: E731
    return key(a) == key(b)


def run(arguments):
    artifacts = arguments.artifacts
    shutil.rmtree(artifacts, ignore_errors=True)
    os.makedirs(artifacts)
    web_port, gateway_port = free_port(), free_port()
    origin = f"http://127.0.0.1:{web_port}"
    gateway = Gateway(arguments.ferry, arguments.database_url, arguments.secret, gateway_port, origin,
                      os.path.join(artifacts, "gateway.log"))
    web = WebServer(web_port)
    page = f"{origin}/?gateway={gateway.url}"
    profiles = tempfile.mkdtemp(prefix="ferry-tasks-web-")
    devices = []
    try:
        web.start()
        check_web_server(origin)
        log("serve.py: the page and client served, every other path 404")
        gateway.start()
        log(f"ferry serve on {gateway.url}, page on {origin}")

        a = Device("a", page, artifacts, os.path.join(profiles, "a"))
        devices.append(a)
        b = Device("b", page, artifacts, os.path.join(profiles, "b"))
        devices.append(b)

        # 1. Two devices, each an anonymous account, each with the service worker in control.
        for device in (a, b):
            device.open()
            device.synced("the first launch synced and the stream connected")
            device.wait("the service worker controlling the page",
                        lambda d=device: d.js("return navigator.serviceWorker.controller !== null"))
            assert "anonymous" in device.account(), device.account()
        assert a.js("return document.body.dataset.user") != b.js("return document.body.dataset.user")
        a.shot("01-opened")
        b.shot("01-opened")

        # 2. A: add, edit, complete, delete; then create an account with the tasks in it.
        for title in ["Buy milk", "Call mum", "Water the plants"]:
            a.add(title)
        a.edit("Buy milk", "Buy oat milk")
        a.complete("Call mum")
        a.delete("Water the plants")
        a.synced("A's edits pushed")
        assert sorted(a.titles()) == ["Buy oat milk", "Call mum"], a.titles()
        a.shot("02-edited")
        email, password = f"tasks-{int(time.time() * 1000)}@example.org", "tasks web password"
        a.account_form(email, password, "#link")
        a.wait("A signed in as the email", lambda: a.account() == f"Signed in as {email}")
        assert not a.driver.find_element(By.ID, "account-form").is_displayed(), "the sign-in form is still shown"
        assert a.driver.find_element(By.ID, "sign-out").is_displayed(), "no sign-out button"
        a.shot("02-account-created")

        # 3. B holds a task of its own and signs in: the choice; keep the account's.
        b.add("From B's device")
        b.synced("B's task pushed")
        b.account_form(email, password, "#sign-in")
        b.wait("the keep-device / keep-cloud choice", lambda: b.js("return document.getElementById('choice').open"))
        text = b.js("return document.getElementById('choice-text').textContent")
        assert "holds 1 task made before" in text and "account holds 2 tasks" in text, text
        b.shot("03-sign-in-choice")
        b.click("#keep-cloud")
        b.wait("B signed in", lambda: b.account() == f"Signed in as {email}")
        b.wait("B holding the account's tasks", lambda: sorted(b.titles()) == ["Buy oat milk", "Call mum"])
        assert any(t["title"] == "Call mum" and t["done"] for t in b.tasks()), b.tasks()
        b.synced("B connected to the account")
        b.shot("03-kept-the-account")

        # 4. A task added on A appears on B without a reload.
        b.js("window.__sameDocument = 'yes'")
        a.add("Cued task")
        b.wait("the cued task on B", lambda: "Cued task" in b.titles(), seconds=20)
        assert b.js("return window.__sameDocument") == "yes", "B was reloaded"
        a.shot("04-cue")
        b.shot("04-cue")

        # 5. The gateway and the web server stop; both edit; both reload: page and data are there.
        gateway.stop()
        web.stop()
        for device in (a, b):
            device.wait("the status offline", lambda d=device: not d.connected())
        a.edit("Call mum", "Call mum tonight")
        a.add("Offline from A")
        b.complete("Buy oat milk")
        b.delete("Cued task")
        b.add("Offline from B")
        assert a.pending() >= 2 and b.pending() >= 3, (a.pending(), b.pending())
        before = {device.name: (sorted(device.titles()), device.pending()) for device in (a, b)}
        for device in (a, b):
            device.reload()
            device.wait("the offline rows after the reload",
                        lambda d=device: (sorted(d.titles()), d.pending()) == before[d.name])
            assert not device.connected()
            synced = device.js("return document.getElementById('status-synced').textContent")
            assert synced.startswith("last synced "), synced
            assert device.js("return navigator.serviceWorker.controller !== null"), "the page did not come from the worker"
        a.shot("05-offline-reloaded")
        b.shot("05-offline-reloaded")

        # 6. Back: both drain and converge.
        web.start()
        gateway.start()
        expected = sorted([("Buy oat milk", True), ("Call mum tonight", True), ("Offline from A", False),
                           ("Offline from B", False)])
        for device in (a, b):
            device.wait("drained and converged after the reconnect",
                        lambda d=device: d.pending() == 0 and d.connected()
                        and sorted((t["title"], t["done"]) for t in d.tasks()) == expected, seconds=60)
        assert same_lists(a, b)
        a.shot("06-converged")
        b.shot("06-converged")

        # 7. A signs out, adds a task, signs in again and keeps this device's: B follows by its cue.
        a.click("#sign-out")
        a.wait("A anonymous again with nothing", lambda: "anonymous" in a.account() and a.titles() == [])
        a.add("Only on A")
        a.synced("A's new task pushed")
        a.account_form(email, password, "#sign-in")
        a.wait("the choice on A", lambda: a.js("return document.getElementById('choice').open"))
        text = a.js("return document.getElementById('choice-text').textContent")
        assert "holds 1 task made before" in text and "account holds 4 tasks" in text, text
        a.shot("07-sign-in-choice")
        a.click("#keep-device")
        a.wait("A signed in, keeping its task", lambda: a.account() == f"Signed in as {email}" and a.titles() == ["Only on A"])
        a.synced("A synced after keeping its task")
        b.wait("B following the account", lambda: b.titles() == ["Only on A"], seconds=20)
        a.shot("07-kept-the-device")
        b.shot("07-kept-the-device")
        log("every step passed")
        return 0
    except BaseException:
        for device in devices:
            try:
                device.shot("failure")
                log(f"{device.name}: {device.state()}")
            except Exception:  # noqa: BLE001
                pass
        raise
    finally:
        for device in devices:
            device.quit()
        gateway.stop()
        web.stop()
        shutil.rmtree(profiles, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ferry", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--artifacts", required=True)
    parser.add_argument("--deadline", type=int, default=420)
    arguments = parser.parse_args()
    for tool in (CHROMIUM, CHROMEDRIVER):
        if not os.access(tool, os.X_OK):
            sys.exit(f"tasks-web: {tool} is missing: make deps installs chromium and chromium-driver")

    def too_long(signum, frame):
        raise TimeoutError(f"the browser test ran past its {arguments.deadline} s deadline")

    signal.signal(signal.SIGALRM, too_long)
    signal.alarm(arguments.deadline)
    sys.exit(run(arguments))


if __name__ == "__main__":
    main()
