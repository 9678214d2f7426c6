"""A real headless Chromium, driven over the DevTools protocol, for tests that read a page
as a person sees it: the text it renders, where an element lands, what it loaded or ran.

Debian's ``chromium`` (``make browser`` installs it) is started with its debugging port on
127.0.0.1 only and a throwaway profile; the port it picked is read from the profile's
``DevToolsActivePort`` file, and aiohttp's websocket client speaks the protocol. Each `Page` is
a tab of its own with a fixed viewport, so positions mean the same in every test. While a
page loads, every network request, console message, uncaught exception and Content Security
Policy report is recorded, so a test can show that a page fetched nothing and ran nothing.

The time limits below only keep a wedged browser from hanging the run; no test asserts on
how long anything took.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = "chromium"
INSTALL_HINT = "`make browser` installs it (Debian's chromium package, with apt-get)"
# Starting and loading are seconds on a loaded two-core machine; a minute means it is stuck.
START_LIMIT_S = 60.0
CALL_LIMIT_S = 60.0


# Walks the rendered text nodes; a node's box is its range's, so a sentence inside a larger
# block is placed where it is drawn, and a node with no box (display: none) is not found.
_TEXT_BOX_JS = """(needle) => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.textContent.includes(needle)) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const box = range.getBoundingClientRect();
    const style = getComputedStyle(node.parentElement);
    if (box.width === 0 || box.height === 0 || style.visibility === "hidden") continue;
    return {top: box.top + scrollY, bottom: box.bottom + scrollY, left: box.left,
            right: box.right};
  }
  return null;
}"""


class BrowserError(Exception):
    """Chromium is missing, did not start, or answered a command with an error."""


def chromium_path() -> str:
    """The chromium executable on the PATH; its absence is an error that says how to fix it."""
    path = shutil.which(CHROMIUM)
    if path is None:
        raise BrowserError(f"no `{CHROMIUM}` on the PATH: {INSTALL_HINT}")
    return path


@dataclass
class Page:
    """One tab: what it recorded while loading, and calls into it."""

    browser: Browser
    session_id: str
    target_id: str
    requests: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises are awaited)."""
        reply = self.browser.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            self.session_id,
        )
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression[:80]!r} threw: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def visible_text(self) -> str:
        """The text the page renders (``innerText`` leaves out what is hidden)."""
        return self.evaluate("document.body.innerText")

    def text_box(self, needle: str) -> dict[str, float] | None:
        """Where the first rendered text containing `needle` lands (top, bottom, left, right,
        in CSS pixels from the top of the page), or None when no visible text holds it."""
        return self.evaluate(f"({_TEXT_BOX_JS})({json.dumps(needle)})")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the viewport (the first screen) written to `path`."""
        reply = self.browser.call("Page.captureScreenshot", {"format": "png"}, self.session_id)
        path.write_bytes(base64.b64decode(reply["data"]))
        return path

    def record(self, method: str, params: dict[str, Any]) -> None:
        if method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])
        elif method == "Runtime.consoleAPICalled":
            self.console.append(" ".join(str(a.get("value", "")) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            self.exceptions.append(str(params["exceptionDetails"]))
        elif method == "Log.entryAdded" and params["entry"].get("source") == "security":
            self.blocked.append(params["entry"]["text"])


class Browser:
    """A headless Chromium for the life of a ``with`` block; `open` gives a loaded `Page`."""

    def __init__(self, width: int = 1280, height: int = 800) -> None:
        self.width, self.height = width, height
        self._loop = asyncio.new_event_loop()
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._loaded: dict[str, asyncio.Event] = {}
        self._pages: dict[str, Page] = {}
        self._process: subprocess.Popen | None = None
        self._profile = tempfile.TemporaryDirectory(prefix="stepscope-chromium-")
        self._http: aiohttp.ClientSession | None = None
        self._socket: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task | None = None

    def __enter__(self) -> Browser:
        try:
            self._loop.run_until_complete(self._start())
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one protocol command and return its result."""
        return self._loop.run_until_complete(
            asyncio.wait_for(self._call(method, params or {}, session), CALL_LIMIT_S)
        )

    def open(self, path: Path) -> Page:
        """A new tab with the file at `path` loaded (its load event fired)."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        page = Page(self, session["sessionId"], target)
        self._pages[page.session_id] = page
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable", {}, page.session_id)
        metrics = {"width": self.width, "height": self.height, "deviceScaleFactor": 1}
        self.call(
            "Emulation.setDeviceMetricsOverride", metrics | {"mobile": False}, page.session_id
        )
        loaded = self._loaded[page.session_id] = asyncio.Event()
        self.call("Page.navigate", {"url": path.resolve().as_uri()}, page.session_id)
        self._loop.run_until_complete(asyncio.wait_for(loaded.wait(), CALL_LIMIT_S))
        return page

    def close(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(asyncio.wait_for(self._socket.close(), 5))
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                self._loop.run_until_complete(self._reader)
        if self._http is not None:
            self._loop.run_until_complete(self._http.close())
        if self._process is not None:
            _stop_group(self._process)
        self._loop.close()
        self._profile.cleanup()

    async def _start(self) -> None:
        profile = Path(self._profile.name)
        command = [
            chromium_path(),
            "--headless=new",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            f"--window-size={self.width},{self.height}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--hide-scrollbars",
            # Chromium refuses to start as root with its sandbox on; the pages a test opens
            # are the test's own files.
            *(["--no-sandbox"] if os.geteuid() == 0 else []),
            "about:blank",
        ]
        log = profile / "chromium.log"
        with log.open("wb") as out:
            # Its own process group: Chromium's helpers (renderer, crashpad) outlive the main
            # process by a moment and keep writing into the profile; close() ends them all.
            self._process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        endpoint = await self._endpoint(profile / "DevToolsActivePort", log)
        self._http = aiohttp.ClientSession()
        self._socket = await self._http.ws_connect(endpoint, max_msg_size=0)
        self._reader = asyncio.ensure_future(self._read())

    async def _endpoint(self, port_file: Path, log: Path) -> str:
        """ws://127.0.0.1:PORT/devtools/browser/ID, once Chromium has written its port file."""
        for _ in range(int(START_LIMIT_S / 0.05)):
            if self._process.poll() is not None:
                raise BrowserError(
                    f"chromium exited with {self._process.returncode}: "
                    f"{log.read_text(errors='replace')[-2000:]}"
                )
            lines = port_file.read_text().split() if port_file.exists() else []
            if len(lines) == 2:
                return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
            await asyncio.sleep(0.05)
        raise BrowserError(f"chromium wrote no {port_file.name} in {START_LIMIT_S:.0f} s")

    async def _call(self, method: str, params: dict, session: str | None) -> dict:
        number = next(self._ids)
        message = {"id": number, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        reply = self._waiting[number] = self._loop.create_future()
        await self._socket.send_str(json.dumps(message))
        answer = await reply
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    async def _read(self) -> None:
        async for message in self._socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(message.data)
            if "id" in data:
                waiting = self._waiting.pop(data["id"], None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(data)
                continue
            page = self._pages.get(data.get("sessionId", ""))
            if page is not None:
                page.record(data["method"], data.get("params", {}))
                if data["method"] == "Page.loadEventFired":
                    self._loaded[page.session_id].set()
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_exception(BrowserError("chromium closed its DevTools connection"))


def _stop_group(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """End Chromium's process group (the group its main process leads) and wait until no
    member is left, so that the profile can be removed: SIGTERM, then SIGKILL past
    ``timeout_s``."""
    group = process.pid
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, timeout_s)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait_s)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
    raise RuntimeError(f"Chromium's process group {group} did not end after SIGKILL")
