"""A persistent cache of scores: one SQLite file (standard library, WAL mode), one row per
(scorer identity, request), each answer committed as it arrives."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time

import numpy as np

from ._request import Request, canonical_json, check_request, decode_logits, digest, encode_logits

SCHEMA = 1
"""The version of the cache's database layout."""
KIND = "blamejax-scores"

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    scorer TEXT NOT NULL,
    model TEXT,
    template TEXT,
    temperature REAL,
    step TEXT NOT NULL,
    variant TEXT NOT NULL,
    inputs TEXT NOT NULL,
    options TEXT NOT NULL,
    logits TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS texts (
    key TEXT PRIMARY KEY,
    scorer TEXT NOT NULL,
    step TEXT NOT NULL,
    variant TEXT NOT NULL,
    inputs TEXT NOT NULL,
    seed INTEGER NOT NULL,
    temperature REAL NOT NULL,
    max_tokens INTEGER NOT NULL,
    text TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    created REAL NOT NULL
);
"""
# The texts table came after schema 1's first files; it is added to them on open (an older
# blamejax reading the file ignores it), so the schema version is unchanged.
_TEXTS = _TABLES.split(";")[2]


class CacheError(ValueError):
    """A cache file that cannot be used: corrupt, not a score cache, or another schema."""


class OfflineMiss(LookupError):
    """In offline mode, a request the cache does not hold."""


class Cache:
    """Scores on disk, keyed on the scorer's identity (kind, model, prompt template,
    temperature, mode) and the request (step, variant, inputs, options); and, in a table of
    their own, the texts of free-text steps (`get_text`, `put_text`), keyed on the model and
    the `TextRequest` (step, variant, inputs, seed, temperature, max tokens).

    - `path`: the SQLite file (created with its tables if absent).
    - `offline`: if True, a request the cache does not hold raises `OfflineMiss` naming it,
      and nothing is ever sent to a model; replay from a committed cache runs this way.

    Safe for several processes and threads writing at once (WAL journal, a busy timeout;
    the first answer stored for a key is kept, and every reader gets that one). Each answer
    is committed on its own as it arrives, so a killed run loses nothing already answered.

    **Raises:** `CacheError` naming the file if it is not SQLite, not a blamejax score cache,
    or written with another schema version.

    ```python
    import numpy as np
    from blamejax.scorers import Cache, Request
    cache = Cache("scores.sqlite")
    r = Request("route", "factual", "refund please", ("refund", "escalate"))
    cache.put("my-model", r, np.array([0.0, float("-inf")]))
    assert cache.get("my-model", r).tolist() == [0.0, float("-inf")]
    assert cache.get("other-model", r) is None and len(cache) == 1
    ```
    """

    def __init__(self, path, *, offline: bool = False, timeout: float = 30.0):
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise TypeError(f"`path` must be a file path, got {path!r}")
        if not isinstance(offline, bool):
            raise TypeError(f"`offline` must be True or False, got {offline!r}")
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 <= timeout < float("inf")
        ):
            raise ValueError(
                f"`timeout` must be a finite number of seconds >= 0 (the wait for a cache another "
                f"process is writing), got {timeout!r}"
            )
        _check_path(os.fspath(path), offline)
        self.path = os.fspath(path)
        self.offline = offline
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise CacheError(f"{self.path}: cannot open the score cache: {error}") from None
        try:
            self._open()
        except sqlite3.DatabaseError as error:
            self._db.close()
            raise CacheError(
                f"{self.path}: not a readable SQLite score cache ({error}); delete it or choose another path"
            ) from None
        except CacheError:
            self._db.close()
            raise

    def _open(self) -> None:
        db = self._db
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise CacheError(
                f"{self.path}: an SQLite file that is not a blamejax score cache (tables {sorted(tables)})"
            )
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        if not tables:
            db.execute("BEGIN IMMEDIATE")
            try:
                for statement in _TABLES.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('kind', ?), ('schema', ?)",
                    (KIND, str(SCHEMA)),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        meta = dict(db.execute("SELECT name, value FROM meta"))
        if meta.get("kind") != KIND:
            raise CacheError(
                f"{self.path}: an SQLite file that is not a blamejax score cache (meta {meta})"
            )
        if meta.get("schema") != str(SCHEMA):
            raise CacheError(
                f"{self.path}: a score cache of schema version {meta.get('schema')}, but this blamejax "
                f"reads version {SCHEMA}; use a matching blamejax or start a new cache file"
            )
        if "texts" not in tables and tables:
            db.execute(_TEXTS)

    def get(self, identity: str, request: Request) -> np.ndarray | None:
        """The stored logits of `request` under the scorer `identity`, or None."""
        request = _checked(identity, request)
        stored = self._stored("answers", "logits", digest(identity, request))
        return None if stored is None else decode_logits(stored)

    def put(
        self,
        identity: str,
        request: Request,
        logits,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> np.ndarray:
        """Store `logits` for `request` (committed at once) unless the key is already held;
        returns the stored logits (the first answer written for the key).

        **Raises:** `ValueError` for logits that are not one number per option, finite or
        -inf and not all -inf (NaN or +inf would be replayed as if scored)."""
        request = _checked(identity, request)
        _check_stored_logits(logits, request)
        fields = _identity_fields(identity)
        row = (
            digest(identity, request),
            identity,
            fields.get("model"),
            fields.get("template"),
            fields.get("temperature"),
            request.step,
            request.variant,
            canonical_json(request.inputs, where="inputs"),
            json.dumps(list(request.options), ensure_ascii=False),
            encode_logits(np.asarray(logits, np.float64)),
            int(input_tokens),
            int(output_tokens),
            time.time(),
        )
        return decode_logits(self._keep_first("answers", "logits", row))

    def get_text(self, identity: str, request) -> str | None:
        """The stored text of the `TextRequest` `request` under `identity`, or None."""
        return self._stored("texts", "text", digest(identity, request))

    def put_text(
        self, identity: str, request, text: str, *, input_tokens: int = 0, output_tokens: int = 0
    ) -> str:
        """Store `text` for the `TextRequest` `request` (committed at once) unless the key is
        already held; returns the stored text (the first written for the key)."""
        if not isinstance(text, str):
            raise TypeError(f"`text` must be a string, got {text!r:.200}")
        row = (
            digest(identity, request),
            identity,
            request.step,
            request.variant,
            canonical_json(request.inputs, where="inputs"),
            int(request.seed),
            float(request.temperature),
            int(request.max_tokens),
            text,
            int(input_tokens),
            int(output_tokens),
            time.time(),
        )
        return self._keep_first("texts", "text", row)

    def _stored(self, table: str, column: str, key: str):
        """The `column` of the row of `table` under `key`, or None."""
        with self._lock:
            row = self._db.execute(f"SELECT {column} FROM {table} WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def _keep_first(self, table: str, column: str, row: tuple):
        """Store `row` (its key first) in `table` unless the key is held; the stored `column`
        of the key (the first written for it)."""
        marks = ", ".join("?" * len(row))
        with self._lock:
            self._db.execute(f"INSERT OR IGNORE INTO {table} VALUES ({marks})", row)
            stored = self._db.execute(f"SELECT {column} FROM {table} WHERE key = ?", (row[0],))
            return stored.fetchone()[0]

    def num_texts(self) -> int:
        """How many texts the cache holds (`len(cache)` counts the scores)."""
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM texts").fetchone()[0]

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]

    def close(self) -> None:
        """Close the database (every answer is already committed)."""
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"Cache({self.path!r}, offline={self.offline})"


def _check_path(path: str, offline: bool) -> None:
    if path == ":memory:":
        return
    if os.path.isdir(path):
        raise IsADirectoryError(
            f"`path` {path!r} is a folder; expected the cache's file (created if absent)"
        )
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"`path` {path!r}: its folder {folder!r} does not exist")
    if offline and not os.path.exists(path):
        raise FileNotFoundError(
            f"offline cache {path!r} does not exist: offline mode replays a cache scored earlier; "
            "check the path, or open it with offline=False to start one"
        )


def _checked(identity, request) -> Request:
    if not isinstance(identity, str):
        raise TypeError(
            f"`identity` must be a string (the scorer's identity), got {identity!r:.80}"
        )
    return check_request(request, where="request")


def _check_stored_logits(logits, request: Request) -> None:
    try:
        row = np.asarray(logits, np.float64)
    except (TypeError, ValueError):
        row = None
    if (
        row is None
        or row.shape != (len(request.options),)
        or np.isnan(row).any()
        or (row == np.inf).any()
        or (row == -np.inf).all()
    ):
        raise ValueError(
            f"`logits` must be {len(request.options)} numbers, one per option of {request.describe()}, "
            f"finite or -inf and not all -inf; got {logits!r:.120}"
        )


def _identity_fields(identity: str) -> dict:
    try:
        fields = json.loads(identity)
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}
