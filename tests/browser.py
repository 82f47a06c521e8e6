"""A headless Chromium driven over WebDriver, for the tests of pages statekernel writes.

Debian's `chromium` and `chromium-driver` packages (`.ci/run` installs them). ChromeDriver
listens on 127.0.0.1 only and speaks plain HTTP with JSON, so the standard library is the
whole client: no Selenium, no Playwright. The browser's performance log records every
network request a page makes, which is how a test proves a page makes none.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HOW_TO_INSTALL = (
    "install Debian's chromium and chromium-driver packages "
    "(`apt-get install chromium chromium-driver`) to run it; .ci/run does"
)
_ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


def find_browser() -> tuple[str, str] | None:
    """The chromium and chromedriver executables, or None when either is missing."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


class Browser:
    """One WebDriver session: a headless Chromium window of a fixed size."""

    def __init__(self, url: str, session: str) -> None:
        self._base = f"{url}/session/{session}"

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        return _request(method, self._base + path, body)

    def open(self, path: Path) -> None:
        self._call("POST", "/url", {"url": path.resolve().as_uri()})

    def find_all(self, css: str) -> list[str]:
        found = self._call("POST", "/elements", {"using": "css selector", "value": css})
        return [element[_ELEMENT] for element in found]

    def text(self, element: str) -> str:
        return str(self._call("GET", f"/element/{element}/text"))

    def attribute(self, element: str, name: str) -> str | None:
        value = self._call("GET", f"/element/{element}/attribute/{name}")
        return None if value is None else str(value)

    def click(self, element: str) -> None:
        self._call("POST", f"/element/{element}/click", {})

    def run(self, script: str) -> Any:
        return self._call("POST", "/execute/sync", {"script": script, "args": []})

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self._call("GET", "/screenshot")))

    def requests(self) -> list[tuple[str, str]]:
        """The requests the browser sent since the last call (its performance log), as
        (URL, URL of the document that made it)."""
        entries = self._call("POST", "/se/log", {"type": "performance"})
        sent = []
        for entry in entries:
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                params = message["params"]
                sent.append((str(params["request"]["url"]), str(params.get("documentURL"))))
        return sent


@contextlib.contextmanager
def headless_chromium(chromium: str, driver: str, profile: Path) -> Iterator[Browser]:
    """A browser session, ended (and its driver stopped) on leaving, also on failure."""
    port = _free_port()
    process = subprocess.Popen(
        [driver, f"--port={port}", "--allowed-ips=127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(url)
        options = {
            "binary": chromium,
            "args": [
                "--headless=new",
                "--no-sandbox",  # as root in a container
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1600,1000",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
            ],
        }
        capabilities = {
            "browserName": "chrome",
            "goog:chromeOptions": options,
            "goog:loggingPrefs": {"performance": "ALL"},
        }
        session = _request(
            "POST", url + "/session", {"capabilities": {"alwaysMatch": capabilities}}
        )
        browser = Browser(url, session["sessionId"])
        try:
            yield browser
        finally:
            with contextlib.suppress(OSError, urllib.error.URLError):
                _request("DELETE", f"{url}/session/{session['sessionId']}")
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def _request(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read())["value"]
    except urllib.error.HTTPError as error:
        raise AssertionError(f"WebDriver {method} {url}: {error.read().decode()}") from error


def _wait_for(url: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            if _request("GET", url + "/status")["ready"]:
                return
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"chromedriver did not answer on {url}")
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
