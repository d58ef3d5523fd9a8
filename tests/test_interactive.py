"""The interactive page (`BatchResult.to_html(interactive=True)`).

The page's numbers must equal `interactive_reduction`'s bit for bit, before and after edits:
read back from headless Chromium over the DevTools protocol (a minimal websocket client on
the standard library below) and compared with `==` on float64 values. The reference itself is
checked against the JAX attributions of the result (within the JAX dtype's rounding) and
against hand-computed games.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import os
import shutil
import socket
import struct
import subprocess
import time
import urllib.parse
import urllib.request

import jax
import numpy as np
import pytest

import blamejax as bj
from blamejax.report import interactive_html, interactive_reduction
from blamejax.report._interactive import page_data

EPS = float(np.finfo(jax.dtypes.canonicalize_dtype(np.float64)).eps)  # float32 unless x64


@pytest.fixture(scope="module")
def result():
    """Refund demo, fresh noise with 3 worlds: values k/3 (not exact in binary), several
    worlds per failure (resolve and last-step shares between 0 and 1)."""
    cases = bj.demos.refund_cases(40)
    return bj.blame_batch(
        bj.demos.refund_pipeline, cases, 0, noise="fresh", num_worlds=3, keep_coalitions=True
    )


def _reference(result, scores=None):
    scores = result.coalition_scores if scores is None else scores
    return interactive_reduction(scores, result.last_step, result.threshold)


# ---------------------------------------------------------------------------------------
# The reference reduction and the stored tables (no browser).
# ---------------------------------------------------------------------------------------


def _brute_shapley(v, n):
    """Shapley values by enumerating every order (exact fractions of the float values)."""
    from fractions import Fraction
    from itertools import permutations

    phi = [Fraction(0)] * n
    orders = list(permutations(range(n)))
    for order in orders:
        m = 0
        for i in order:
            phi[i] += Fraction(v[m | 1 << i]) - Fraction(v[m])
            m |= 1 << i
    return [float(p / len(orders)) for p in phi]


def test_reference_matches_brute_force_and_jax():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 5):
        scores = rng.random((4, 3, 1 << n))  # distinct, non-zero values
        last = rng.integers(-1, n, size=(4, 3))
        out = interactive_reduction(scores, last, 0.5)
        dtype = jax.dtypes.canonicalize_dtype(np.float64)
        attribute = jax.jit(jax.vmap(lambda v: bj.reduction.attribute(v, interactions=False)))
        jax_values = attribute(jax.numpy.asarray(scores.mean(1), dtype))
        tol = 8 * n * float(np.finfo(dtype).eps)
        for name in ("shapley", "banzhaf", "fix_alone", "leave_one_out"):
            np.testing.assert_allclose(out[name], getattr(jax_values, name), rtol=0, atol=tol)
        for f in range(4):
            v = scores[f].mean(0)
            np.testing.assert_allclose(
                out["shapley"][f], _brute_shapley(v.tolist(), n), rtol=0, atol=1e-15
            )
            assert out["resolve"][f] == [
                float(np.mean(scores[f, :, 1 << i] >= 0.5)) for i in range(n)
            ]
            assert out["last_step"][f] == [float(np.mean(last[f] == i)) for i in range(n)]
        assert out["batch"]["last_step_rate"] == [float(np.mean(last == i)) for i in range(n)]


def test_reference_hand_computed_game():
    # Players planner, retriever, writer, reviewer; the run passes when the reviewer is fixed
    # together with the planner or the retriever. By hand: the reviewer is pivotal unless it
    # comes first among {planner, retriever, reviewer} (2/3); the planner only when the
    # reviewer comes before it and the retriever after it (1/6); the writer never. Banzhaf:
    # the planner is pivotal in 2 of the 8 sets of the others, the reviewer in 6.
    v = [float(bool(m & 3) and bool(m & 8)) for m in range(16)]
    out = interactive_reduction(np.array([[v]]), np.array([[3]]), 1.0)
    np.testing.assert_allclose(out["shapley"][0], [1 / 6, 1 / 6, 0, 2 / 3], rtol=0, atol=1e-15)
    np.testing.assert_allclose(out["banzhaf"][0], [1 / 4, 1 / 4, 0, 3 / 4], rtol=0, atol=1e-15)
    assert out["fix_alone"][0] == [0.0, 0.0, 0.0, 0.0]
    assert out["leave_one_out"][0] == [0.0, 0.0, 0.0, 1.0]
    assert out["batch"]["last_step_rate"] == [0.0, 0.0, 0.0, 1.0]


def test_reference_agrees_with_the_result(result):
    out = _reference(result)
    tol = 16 * EPS  # the JAX dtype's rounding of values in [0, 1], n = 4
    np.testing.assert_allclose(out["shapley"], result.shapley, rtol=0, atol=tol)
    np.testing.assert_allclose(out["empty"], result.empty, rtol=0, atol=tol)
    np.testing.assert_allclose(out["full"], result.full, rtol=0, atol=tol)
    np.testing.assert_allclose(out["resolve"], result.resolve, rtol=0, atol=tol)
    batch = out["batch"]
    np.testing.assert_allclose(batch["shapley"], result.mean_shapley, rtol=0, atol=tol)
    np.testing.assert_allclose(batch["share_of_repair"], result.share_of_repair, rtol=0, atol=tol)
    np.testing.assert_allclose(batch["resolve_rate"], result.resolve_rate, rtol=0, atol=tol)
    assert batch["last_step_rate"] == result.last_step_rate.tolist()  # counts: exact


def test_kept_tables_are_the_drill_down(result):
    n = len(result.steps)
    assert result.coalition_scores.shape == (result.num_analysed, 3, 1 << n)
    # Coalition 0 is the failed run, the last one the fully fixed run (recorded noise).
    np.testing.assert_array_equal(result.coalition_choices[:, 0], result.factual_choice)
    np.testing.assert_array_equal(result.coalition_choices[:, -1], result.fixed_choice)
    back = bj.BatchResult.from_dict(result.to_dict())
    np.testing.assert_array_equal(back.coalition_scores, result.coalition_scores)
    np.testing.assert_array_equal(back.coalition_choices, result.coalition_choices)


def test_interactive_needs_the_tables(result):
    plain = dataclasses.replace(result, coalition_scores=None, coalition_choices=None)
    with pytest.raises(ValueError, match="keep_coalitions=True"):
        plain.to_html(interactive=True)
    cases = bj.demos.refund_cases(10)
    with pytest.raises(ValueError, match="needs the exact estimator"):
        bj.blame_batch(bj.demos.refund_pipeline, cases, 0, estimator="mc", keep_coalitions=True)
    with pytest.raises(TypeError, match="`keep_coalitions` must be a bool"):
        bj.blame_batch(bj.demos.refund_pipeline, cases, 0, keep_coalitions="yes")


def test_no_failures_page():
    def passes(ctx, case):
        return ctx.choose("a", case["a"]).take(case["ok"])

    cases = {"a": np.zeros((3, 2, 2), np.float32), "ok": np.ones((3, 2), np.float32)}
    result = bj.blame_batch(passes, cases, 0, keep_coalitions=True)
    assert result.num_analysed == 0
    assert "No failures: all 3 cases passed" in result.to_html(interactive=True)


def test_page_is_self_contained(result, tmp_path):
    page = result.to_html(interactive=True)
    assert page == interactive_html(result)
    lowered = page.lower()
    for token in ("http://", "https://", "src=", "@import", "url(", "<link"):
        assert token not in lowered, token
    path = tmp_path / "page.html"
    result.save_html(path, interactive=True)
    assert path.read_text(encoding="utf-8") == page
    print(f"interactive page: {path.stat().st_size} bytes for {result.num_analysed} failures")
    data = page_data(result)
    # The embedded floats are the stored ones exactly.
    assert np.array_equal(
        np.array([f["scores"] for f in data["failures"]]), result.coalition_scores
    )


# ---------------------------------------------------------------------------------------
# Headless Chromium over the DevTools protocol.
# ---------------------------------------------------------------------------------------

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class _WebSocket:
    """A minimal websocket client (RFC 6455): text frames out (masked), frames in."""

    def __init__(self, url: str, timeout: float):
        parts = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        accept = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()
        assert head.startswith(b"HTTP/1.1 101") and accept.encode() in head, head

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the browser closed the DevTools connection")
        self.buffer += chunk

    def _take(self, count: int) -> bytes:
        while len(self.buffer) < count:
            self._fill()
        out, self.buffer = self.buffer[:count], self.buffer[count:]
        return out

    def _frame(self, opcode: int, payload: bytes):
        head = bytes([0x80 | opcode])
        size = len(payload)
        if size < 126:
            head += bytes([0x80 | size])
        elif size < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", size)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", size)
        mask = os.urandom(4)
        body = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + body)

    def send(self, text: str):
        self._frame(0x1, text.encode())

    def receive(self) -> str:
        parts = []
        while True:
            first, second = self._take(2)
            opcode, size = first & 0x0F, second & 0x7F
            if size == 126:
                size = struct.unpack(">H", self._take(2))[0]
            elif size == 127:
                size = struct.unpack(">Q", self._take(8))[0]
            mask = self._take(4) if second & 0x80 else None
            payload = self._take(size)
            if mask:
                payload = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
            if opcode == 0x9:  # ping
                self._frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise ConnectionError("the browser closed the DevTools connection")
            if opcode in (0x0, 0x1, 0x2):
                parts.append(payload)
                if first & 0x80:
                    return b"".join(parts).decode()

    def close(self):
        self.sock.close()


class _Page:
    """One page of a headless Chromium, driven with DevTools protocol commands."""

    def __init__(self, socket_: _WebSocket):
        self.ws = socket_
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.receive())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def js(self, expression: str):
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in out:
            raise RuntimeError(f"{expression}: {out['exceptionDetails']}")
        return out["result"].get("value")

    def key(self, key: str, code: str, keycode: int, text: str | None = None):
        down = dict(type="keyDown", key=key, code=code, windowsVirtualKeyCode=keycode)
        if text is not None:
            down["text"] = text
        self.call("Input.dispatchKeyEvent", **down)
        self.call(
            "Input.dispatchKeyEvent",
            type="keyUp",
            key=key,
            code=code,
            windowsVirtualKeyCode=keycode,
        )

    def click(self, selector: str):
        box = self.js(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView();"
            " const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent",
                type=kind,
                x=box[0],
                y=box[1],
                button="left",
                clickCount=1,
            )


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser_page(result, tmp_path_factory):
    """The interactive page loaded in one headless Chromium for this module (bounded in time,
    killed after)."""
    tmp_path = tmp_path_factory.mktemp("chromium")
    path = tmp_path / "interactive.html"
    result.save_html(path, interactive=True)
    profile = tmp_path / "profile"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--remote-debugging-port=0",
        "--remote-allow-origins=*",
        f"--user-data-dir={profile}",
    ]
    log = open(tmp_path / "chromium.log", "wb")
    process = subprocess.Popen([_chromium(), *flags, path.as_uri()], stdout=log, stderr=log)
    ws = None
    try:
        deadline = time.monotonic() + 60
        port_file = profile / "DevToolsActivePort"
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            assert process.poll() is None, (tmp_path / "chromium.log").read_bytes()[-2000:]
            assert time.monotonic() < deadline, (
                "chromium did not open its DevTools port within 60 s"
            )
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
                targets = [
                    t
                    for t in json.load(answer)
                    if t.get("type") == "page" and t["url"].endswith(".html")
                ]
            if targets:
                break
            assert time.monotonic() < deadline, "no page target within 60 s"
            time.sleep(0.05)
        ws = _WebSocket(targets[0]["webSocketDebuggerUrl"], timeout=30)
        page = _Page(ws)
        while not page.js(
            "document.readyState === 'complete' && typeof window.blamejax === 'object'"
        ):
            assert time.monotonic() < deadline, "the page did not load within 60 s"
            time.sleep(0.05)
        yield page
    finally:
        if ws is not None:
            ws.close()
        process.kill()
        process.wait(timeout=30)
        log.close()


@pytest.fixture
def page(browser_page):
    """The loaded page with every edit undone and the first failure selected."""
    browser_page.js("blamejax.reset(); blamejax.select(0, 0)")
    return browser_page


def _same(page_numbers, python):
    """Bit-for-bit equality of the page's JSON numbers (NaN read back as null) and Python's."""

    def walk(a, b, where):
        if isinstance(b, dict):
            assert set(a) == set(b), where
            for k in b:
                walk(a[k], b[k], f"{where}.{k}")
        elif isinstance(b, list):
            assert len(a) == len(b), where
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{where}[{i}]")
        elif isinstance(b, float) and math.isnan(b):
            assert a is None, where
        elif a == "-0":  # JSON has no negative zero; the page writes it as this string
            assert b == 0 and math.copysign(1, b) == -1, where
        else:
            assert (
                isinstance(a, (int, float))
                and float(a) == b
                and math.copysign(1, float(a)) == math.copysign(1, b)
            ), (where, a, b)

    walk(page_numbers, python, "numbers")


needs_chromium = pytest.mark.skipif(
    _chromium() is None and os.environ.get("CI") != "true",
    reason="Debian's chromium is not installed here (CI installs it)",
)


@needs_chromium
def test_page_numbers_equal_python_bit_for_bit(result, page):
    scores = np.array(result.coalition_scores)
    _same(json.loads(page.js("blamejax.numbers()")), _reference(result, scores))
    size = scores.shape[2]
    rng = np.random.default_rng(1)
    # Edits through the page's API: arbitrary float64 scores in single worlds, a success
    # rate, a flip of a passing and of a failing coalition.
    for _ in range(20):
        f, w, m = int(rng.integers(scores.shape[0])), int(rng.integers(3)), int(rng.integers(size))
        x = float(rng.random())
        page.js(f"blamejax.setScore({f}, {m}, {w}, {x!r})")
        scores[f, w, m] = x
    page.js("blamejax.setRate(2, 5, 0.3)")
    scores[2, :, 5] = 0.3
    for f, m in ((0, size - 1), (1, 0)):
        passes = _reference(result, scores)["value"][f][m] >= result.threshold
        page.js(f"blamejax.flip({f}, {m})")
        scores[f, :, m] = result.score_range[0] if passes else result.score_range[1]
    _same(json.loads(page.js("blamejax.numbers()")), _reference(result, scores))
    with pytest.raises(RuntimeError, match="a score must be a number"):
        page.js("blamejax.setRate(0, 1, 1.5)")
    page.js("blamejax.reset()")
    _same(json.loads(page.js("blamejax.numbers()")), _reference(result))


@needs_chromium
def test_page_by_mouse_and_keyboard(result, page):
    n = len(result.steps)
    # Focus order: the failure list, the fix checkboxes, then the edit controls.
    page.js("document.activeElement.blur()")
    order = []
    for _ in range(n + 6):
        page.key("Tab", "Tab", 9)
        order.append(page.js("document.activeElement.id"))
    assert order == [
        "bj-failure",
        *(f"bj-fix-{i}" for i in range(n)),
        "bj-flip",
        "bj-rate",
        "bj-set",
        "bj-reset",
        "bj-reset-all",
    ]
    # A click on a label's checkbox toggles step 1's fix; Space on step 3's checkbox too.
    page.js("blamejax.select(1, 0)")
    page.click("#bj-fix-1")
    page.js("document.getElementById('bj-fix-3').focus()")
    page.key(" ", "Space", 32, " ")
    m = (1 << 1) | (1 << 3)
    assert json.loads(page.js("blamejax.view()")) == {"failure": 1, "coalition": m}
    scores = np.array(result.coalition_scores)
    shown = float(page.js("document.getElementById('bj-coalition').dataset.value"))
    assert shown == _reference(result, scores)["value"][1][m]
    # Enter on the focused flip button flips that coalition.
    passes = _reference(result, scores)["value"][1][m] >= result.threshold
    page.js("document.getElementById('bj-flip').focus()")
    page.key("Enter", "Enter", 13, "\r")
    scores[1, :, m] = result.score_range[0] if passes else result.score_range[1]
    python = _reference(result, scores)
    _same(json.loads(page.js("blamejax.numbers()")), python)
    # The success rate typed into its field and set by keyboard.
    assert (
        float(page.js("document.getElementById('bj-rate').value")) == python["value"][1][m]
    )  # prefilled
    page.js("const r = document.getElementById('bj-rate'); r.value = ''; r.focus()")
    for ch in "0.25":
        page.call("Input.insertText", text=ch)
    page.key("Enter", "Enter", 13, "\r")
    scores[1, :, m] = 0.25
    python = _reference(result, scores)
    _same(json.loads(page.js("blamejax.numbers()")), python)
    # The page shows what it computed: the batch table's cells hold the same numbers.
    cells = page.js(
        "Array.from(document.querySelectorAll('#bj-batch tr[data-step] td[data-value]')).map(td => td.dataset.value)"
    )
    assert [float(c) for c in cells[:2]] == [
        python["batch"]["shapley"][0],
        python["batch"]["banzhaf"][0],
    ]
    assert "(1 coalition edited)" in page.js(
        "document.querySelector('#bj-batch caption').textContent"
    )
    # A coalition's select button, pressed by keyboard, selects it and keeps the focus.
    page.js("document.querySelector('button[data-coalition=\"5\"]').focus()")
    page.key("Enter", "Enter", 13, "\r")
    assert json.loads(page.js("blamejax.view()")) == {"failure": 1, "coalition": 5}
    assert page.js("document.activeElement.dataset.coalition") == "5"
    page.js("blamejax.select(1, " + str(m) + ")")
    # The outputs shown for the coalition are the stored ones.
    options = page.js(
        "Array.from(document.querySelectorAll('#bj-outputs td[data-option]')).map(td => td.dataset.option)"
    )
    assert [int(o) for o in options] == result.coalition_choices[1, m].tolist()
