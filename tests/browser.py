"""Open a page in headless Chromium over the DevTools protocol; check its layout; screenshot it.

Chromium is Debian's ``chromium`` package (``/usr/bin/chromium``) or
``chromium-headless-shell``; nothing is downloaded. It starts with a fresh
profile and every network service off, and listens on a DevTools port chosen
by itself (``--remote-debugging-port=0``; it writes the port to
``DevToolsActivePort`` in the profile folder). The client is aiohttp's websocket (protocol:
https://chromedevtools.github.io/devtools-protocol/, domains Page, Runtime,
Log, Emulation).

``check_page(path, widths, shots)`` returns, per viewport width, the console
errors, uncaught exceptions and layout problems of the page (every ``<details>``
opened first), and writes a full-page PNG per width into ``shots``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-headless-shell",
              "/usr/lib/chromium/chromium", "/usr/lib/chromium/headless_shell")


def find_chromium() -> str | None:
    """The Chromium binary to use, or None when none is installed."""
    env = os.environ.get("KVREPLAY_CHROMIUM")
    if env and Path(env).exists():
        return env
    for p in (*CANDIDATES, shutil.which("chromium") or "", shutil.which("chromium-headless-shell") or ""):
        if p and Path(p).exists():
            return p
    return None


FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)

# Runs in the page: opens every <details>, then lists what is out of reach. An element
# is in reach when it lies within the viewport's width, or inside an ancestor that
# scrolls horizontally (overflow-x auto/scroll) which itself lies within the width.
LAYOUT_JS = r"""
(() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const vw = document.documentElement.clientWidth;
  const problems = [];
  const scroller = el => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const ox = getComputedStyle(p).overflowX;
      if (ox === 'auto' || ox === 'scroll') return p;
    }
    return null;
  };
  const clipper = el => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const ox = getComputedStyle(p).overflowX;
      if (ox === 'hidden' || ox === 'clip') return p;
    }
    return null;
  };
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (el.dataset.table ? '[data-table=' + el.dataset.table + ']' : '') +
    (el.dataset.plot ? '[data-plot=' + el.dataset.plot + ']' : '');
  if (document.documentElement.scrollWidth > vw + 1)
    problems.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' px > ' + vw + ' px');
  const sections = [...document.querySelectorAll('h1, h2, dl, .banner, figure, ul, p, pre, details')];
  for (const el of sections) {
    const r = el.getBoundingClientRect();
    const sc = scroller(el);
    if (!sc && (r.left < -1 || r.right > vw + 1))
      problems.push(name(el) + ' outside the page: ' + Math.round(r.left) + '..' + Math.round(r.right));
  }
  let columns = 0;
  const tables = [...document.querySelectorAll('table')];
  for (const t of tables) {
    const sc = scroller(t);
    const cl = clipper(t);
    if (cl) problems.push(name(t) + ' inside a clipping box (overflow hidden)');
    if (sc) {
      const sr = sc.getBoundingClientRect();
      if (sr.right > vw + 1) problems.push(name(t) + ': its scroll box ends past the page');
    }
    for (const th of t.querySelectorAll('thead th')) {
      columns += 1;
      const r = th.getBoundingClientRect();
      if (r.width < 1 || r.height < 1 || getComputedStyle(th).display === 'none' ||
          getComputedStyle(th).visibility === 'hidden') {
        problems.push(name(t) + ' column "' + th.textContent + '" hidden');
        continue;
      }
      if (sc) {
        const sr = sc.getBoundingClientRect();
        const right = r.right - sr.left + sc.scrollLeft;
        if (right > sc.scrollWidth + 1)
          problems.push(name(t) + ' column "' + th.textContent + '" cut inside its scroll box');
      } else if (r.right > vw + 1) {
        problems.push(name(t) + ' column "' + th.textContent + '" off the page at ' + Math.round(r.right) + ' px');
      }
    }
  }
  const h2 = [...document.querySelectorAll('h2')].map(h => h.textContent);
  return JSON.stringify({viewport: vw, problems, sections: h2, tables: tables.length, columns,
                         figures: document.querySelectorAll('figure').length});
})()
"""


class _Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws, self.n = ws, 0
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.loaded = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.waiting:
                self.waiting.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)
                if data["method"] == "Page.loadEventFired":
                    self.loaded.set()

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.n += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[self.n] = fut
        await self.ws.send_str(json.dumps({"id": self.n, "method": method, "params": params}))
        data = await asyncio.wait_for(fut, 60)
        if "error" in data:
            raise RuntimeError(f"{method}: {data['error']}")
        return data.get("result", {})


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for ev in events:
        m, p = ev["method"], ev.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            out.append("exception: " + str(p.get("exceptionDetails", {}).get("text")))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append("log: " + str(p["entry"].get("text")))
    return out


async def _check(chromium: str, page_url: str, widths: tuple[int, ...], shots: Path,
                 stem: str) -> dict[int, dict[str, Any]]:
    profile = tempfile.mkdtemp(prefix="kvreplay-chromium-")
    proc = subprocess.Popen(
        [chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        # Chromium writes the port it chose to <user-data-dir>/DevToolsActivePort.
        port_file = Path(profile) / "DevToolsActivePort"
        port = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while port is None and loop.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {proc.returncode} before listening")
            with contextlib.suppress(OSError, ValueError, IndexError):
                port = int(port_file.read_text().splitlines()[0])
            if port is None:
                await asyncio.sleep(0.1)
        if port is None:
            raise RuntimeError("chromium wrote no DevToolsActivePort in 60 s")
        out: dict[int, dict[str, Any]] = {}
        async with aiohttp.ClientSession() as http:
            async with http.put(f"http://127.0.0.1:{port}/json/new?about:blank") as r:
                target = await r.json(content_type=None)
            async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = _Page(ws)
                for dom in ("Page", "Runtime", "Log"):
                    await page.call(f"{dom}.enable")
                for w in widths:
                    page.events.clear()
                    page.loaded.clear()
                    await page.call("Emulation.setDeviceMetricsOverride", width=w, height=900,
                                    deviceScaleFactor=1, mobile=False)
                    await page.call("Page.navigate", url=page_url)
                    await asyncio.wait_for(page.loaded.wait(), 60)
                    res = await page.call("Runtime.evaluate", expression=LAYOUT_JS, returnByValue=True)
                    layout = json.loads(res["result"]["value"])
                    shot = await page.call("Page.captureScreenshot", format="png",
                                           captureBeyondViewport=True)
                    png = shots / f"{stem}-{w}px.png"
                    png.write_bytes(base64.b64decode(shot["data"]))
                    layout["errors"] = _errors(page.events)
                    layout["screenshot"] = str(png)
                    out[w] = layout
                page.reader.cancel()
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError):
            shutil.rmtree(profile, ignore_errors=True)


def check_page(path: Path, widths: tuple[int, ...], shots: Path, chromium: str | None = None
               ) -> dict[int, dict[str, Any]]:
    """Layout, console errors and a screenshot of ``path`` at each viewport width.

    Returns:
        width -> ``{"viewport", "problems", "errors", "sections", "tables",
        "columns", "figures", "screenshot"}``.

    Raises:
        RuntimeError: Chromium is missing or did not start.
    """
    chromium = chromium or find_chromium()
    if chromium is None:
        raise RuntimeError("no chromium")
    shots.mkdir(parents=True, exist_ok=True)
    return asyncio.run(_check(chromium, path.resolve().as_uri(), widths, shots, path.parent.name))
