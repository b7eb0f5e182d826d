"""Drive a real headless Chromium from a test: open a page, click, read the DOM, screenshot.

The DevTools protocol over a pipe (`--remote-debugging-pipe`: Chromium reads commands on fd 3
and answers on fd 4, NUL-separated JSON), so no websocket library or browser driver package is
needed. One page per `Browser`; its methods block until Chromium answers.

    with Browser() as b:
        b.open(url)
        b.wait_for("document.body.dataset.charts === '4'")
        b.click("#trials th[data-sort=tokens_per_s]")
        rows = b.eval("document.querySelectorAll('#trials tbody tr').length")
        b.screenshot("docs/screenshots/study.png")
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def require_chromium() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs chromium for the browser tests (.ci/run); it is missing")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return CHROMIUM


class BrowserError(RuntimeError):
    """Chromium answered a command with an error, or a script threw, or a wait timed out."""


class Browser:
    def __init__(self, *, width: int = 1400, height: int = 1000) -> None:
        self.width, self.height = width, height
        self._next_id = 0
        self._buffer = b""
        self._profile = tempfile.TemporaryDirectory()
        # The page's uncaught exceptions and console/CSP errors, as Chromium reports them.
        self.errors: list[str] = []

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Browser:
        chromium = require_chromium()
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def as_fds_3_and_4() -> None:  # in the child, before exec: the pipe Chromium expects
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self._proc = subprocess.Popen(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile.name}",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=as_fds_3_and_4,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})
        self._session = attached["sessionId"]
        self._send(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )
        for domain in ("Page", "Runtime", "Log"):
            self._send(f"{domain}.enable", session=True)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self._send("Browser.close")
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        self._profile.cleanup()

    # ------------------------------------------------------------------ the protocol
    def _send(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = False
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                answer = json.loads(raw)
                self._note(answer)
                if answer.get("id") == self._next_id:
                    if "error" in answer:
                        raise BrowserError(f"{method}: {answer['error']}")
                    return dict(answer.get("result", {}))
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise BrowserError(f"{method}: Chromium exited (code {self._proc.poll()})")
            self._buffer += chunk

    def _note(self, event: dict[str, Any]) -> None:
        params = event.get("params", {})
        if event.get("method") == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(details.get("exception", {}).get("description") or str(details))
        elif event.get("method") == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(f"{params['entry'].get('text')} ({params['entry'].get('url')})")
        elif event.get("method") == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value")) for a in params.get("args", [])))

    # ------------------------------------------------------------------ what a test does
    def open(self, url: str, *, ready: str = "document.readyState === 'complete'") -> None:
        self._send("Page.navigate", {"url": url}, session=True)
        time.sleep(0.05)  # the old document may still answer `complete` for a moment
        self.wait_for(ready)

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        answer = self._send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=True,
        )
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"{expression[:80]}: {text}")
        return answer["result"].get("value")

    def wait_for(self, condition: str, timeout_s: float = 20.0) -> Any:
        """Poll the JavaScript `condition` until it is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                value = self.eval(condition)
            except BrowserError:
                value = None  # the page is still loading
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out after {timeout_s:.0f} s waiting for: {condition}")
            time.sleep(0.05)

    def click(self, selector: str) -> None:
        found = self.eval(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return false; e.scrollIntoView(); e.click(); return true; })()"
        )
        if not found:
            raise BrowserError(f"no element matches {selector}")

    def select(self, selector: str, value: str) -> None:
        """Choose `value` in a <select> (or type it into an <input>), as a user does."""
        found = self.eval(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            f" if (!e) return false; e.value = {json.dumps(value)};"
            " e.dispatchEvent(new Event('change', { bubbles: true })); return true; })()"
        )
        if not found:
            raise BrowserError(f"no element matches {selector}")

    def screenshot(self, path: str | Path, *, full_page: bool = True) -> Path:
        """A PNG of the page (all of it with `full_page`) at `path`."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            metrics = self._send("Page.getLayoutMetrics", session=True)
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params["clip"] = {
                "x": 0,
                "y": 0,
                "width": self.width,
                "height": min(int(size["height"]), 8000),
                "scale": 1,
            }
            params["captureBeyondViewport"] = True
        shot = self._send("Page.captureScreenshot", params, session=True)
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(shot["data"]))
        return out
