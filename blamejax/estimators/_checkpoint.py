"""Surviving an interruption of a long run: the checkpoint file, and Ctrl-C deferred to the
end of the current block.

**The file.** One strict-JSON object, written atomically (`write_atomic`: a temporary file
in the same folder, flushed to disk with `fsync`, then `os.replace`d over the old one), so
the file on disk is always one whole checkpoint, never half of one:

- `"kind"`: `"blamejax checkpoint"`, `"format"`: `FORMAT` (an integer, raised whenever the
  layout changes; a newer file is refused, never guessed at);
- `"fingerprint"`: `{argument: description}` of the call that wrote it. Plain settings are
  JSON values (floats are written with `repr`, which reads back exactly); arrays are their
  shape, dtype and the SHA-256 of their bytes; the pipeline is its qualified name and a
  hash of its code (`callable_identity`); the environment adds the blamejax and JAX
  versions, `jax_enable_x64` and the backend, which all change the numbers (and in 64-bit
  mode `"noise draws"`, so that a file from before noise was drawn in float32 is refused);
- `"progress"`: where the run stood (plain integers and dicts);
- `"arrays"`: `{name: {"dtype", "shape", "base64"}}`, each array's bytes (little-endian,
  C order) in base64: exact to the bit, about a third larger than the raw bytes;
- `"sha256"`: the SHA-256 of everything above (canonical JSON: sorted keys, no spaces), so
  a file that was truncated or changed by hand is refused instead of resumed from.

**Interrupts.** `defers_interrupts` replaces the SIGINT handler for the length of a call
with one that only records the signal (and says on stderr that the run will stop after the
current block); the run looks at the record (`interrupted()`) between its phases and blocks. A `KeyboardInterrupt`
raised by Python's own handler lands wherever the main thread happens to be (inside XLA's
compiler, between dispatches of asynchronous computations), and a process that then exits
with work still running in XLA's threads can die with a segmentation fault at shutdown.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import json
import os
import signal
import sys
import threading
import types

import jax
import numpy as np

from ..report import write_atomic

FORMAT = 1
KIND = "blamejax checkpoint"
_START_OVER = (
    "Pass the same arguments to resume from it, or another `checkpoint` path (or delete the "
    "file) to start over"
)


class CheckpointError(ValueError):
    """A `checkpoint` file that cannot be resumed from: written by another call, truncated or
    corrupt, or of a newer format. The message names the file and what differs."""


# --------------------------------------------------------------------------------------
# Fingerprints: what a call was asked, as JSON values that compare exactly.
# --------------------------------------------------------------------------------------


def array_identity(value) -> dict:
    """An array's shape, dtype and the SHA-256 of its bytes (a typed key by its key data)."""
    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(value))
        value = jax.random.key_data(value)
    else:
        impl = None
    array = np.ascontiguousarray(np.asarray(value))
    out = {"shape": list(array.shape), "dtype": array.dtype.name, "sha256": _sha256(array)}
    if impl is not None:
        out["key"] = impl
    return out


def tree_identity(tree) -> dict:
    """A pytree of arrays: its structure and every leaf's path, shape, dtype and hash."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return {
        "treedef": str(treedef),
        "leaves": [
            dict(leaf=jax.tree_util.keystr(path), **array_identity(leaf)) for path, leaf in leaves
        ],
    }


def callable_identity(function) -> dict:
    """A pipeline as far as it can be known from the outside: its qualified name and the
    SHA-256 of its code (the bytecode, constants and names of the function and of every
    function nested in it; for a `functools.partial` also its bound arguments; for a callable
    object its class's `__call__`), with the arrays and plain values of its closure,
    defaults and pytree leaves. What the code reads from globals or other modules is not in it."""
    digest = hashlib.sha256()
    target = function
    while isinstance(target, functools.partial):
        digest.update(_value_bytes((target.args, target.keywords)))
        target = target.func
    name = f"{getattr(target, '__module__', None) or type(target).__module__}." + (
        getattr(target, "__qualname__", None) or type(target).__qualname__
    )
    code = getattr(target, "__code__", None)
    if code is None:  # a callable object: its class's __call__, and its arrays below
        code = getattr(type(target).__call__, "__code__", None)  # a pipeline is callable
    if code is not None:
        digest.update(_code_bytes(code))
    for cell in getattr(target, "__closure__", None) or ():
        try:
            digest.update(_value_bytes(cell.cell_contents))
        except ValueError:  # an empty cell
            digest.update(b"<empty>")
    digest.update(_value_bytes(getattr(target, "__defaults__", None)))
    digest.update(_value_bytes(getattr(target, "__kwdefaults__", None)))
    if not isinstance(target, types.FunctionType):  # e.g. an eqx.Module with parameters
        digest.update(_value_bytes(jax.tree_util.tree_leaves(target)))
    return {"name": name, "code_sha256": digest.hexdigest()}


def _code_bytes(code: types.CodeType) -> bytes:
    parts = [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode()]
    for const in code.co_consts:
        parts.append(
            _code_bytes(const) if isinstance(const, types.CodeType) else repr(const).encode()
        )
    return b"\x00".join(parts)


def _value_bytes(value) -> bytes:
    """Bytes that change when a closure's or default's value does: arrays by their bytes,
    plain values by `repr`, containers element by element, anything else by its type."""
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        return json.dumps(array_identity(value), sort_keys=True).encode()
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value).encode()
    if isinstance(value, (tuple, list)):
        return b"[" + b",".join(_value_bytes(v) for v in value) + b"]"
    if isinstance(value, dict):
        return (
            b"{"
            + b",".join(repr(k).encode() + b":" + _value_bytes(v) for k, v in value.items())
            + b"}"
        )
    return f"<{type(value).__module__}.{type(value).__qualname__}>".encode()


def environment() -> dict:
    """What besides the arguments changes the numbers: the versions, the precision, the
    backend."""
    try:
        version = importlib.metadata.version("blamejax")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        version = "unknown"
    out = {
        "blamejax version": version,
        "jax version": jax.__version__,
        "jax_enable_x64": bool(jax.config.jax_enable_x64),
        "backend": jax.default_backend(),
    }
    if out["jax_enable_x64"]:
        # Noise has been drawn in float32 in both modes since the Unreleased version; a
        # 64-bit file without this entry holds worlds drawn the old way (`_differences`).
        out["noise draws"] = NOISE_DRAWS
    return out


NOISE_DRAWS = "float32"
_MISSING = {
    "noise draws": "the file was written in 64-bit mode before noise was drawn in float32 in "
    "both modes, so its worlds are not this call's"
}


def _sha256(array: np.ndarray) -> str:
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return hashlib.sha256(np.ascontiguousarray(little).tobytes()).hexdigest()


def _json_value(value):
    """A fingerprint entry as it reads back from the file (tuples become lists)."""
    return json.loads(json.dumps(value, allow_nan=True))


# --------------------------------------------------------------------------------------
# The file.
# --------------------------------------------------------------------------------------


def checkpoint_path(checkpoint) -> str:
    """The checked `checkpoint` argument as an absolute path, before any work."""
    if isinstance(checkpoint, bool) or not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(
            f"`checkpoint` must be a file path (str or os.PathLike), got {checkpoint!r}"
        )
    path = os.path.abspath(os.fspath(checkpoint))
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise ValueError(f"`checkpoint` must be a file path, got the folder {path!r}")
    if not os.path.isdir(folder):
        raise ValueError(f"`checkpoint`'s folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"`checkpoint`'s folder {folder!r} is not writable")
    return path


def write_checkpoint(path: str, fingerprint: dict, progress: dict, arrays: dict) -> None:
    """Write one whole checkpoint to `path`, atomically (see the module docstring)."""
    document = {
        "kind": KIND,
        "format": FORMAT,
        "fingerprint": _json_value(fingerprint),
        "progress": _json_value(progress),
        "arrays": {name: _encode(np.asarray(value)) for name, value in arrays.items()},
    }
    document["sha256"] = _checksum(document)
    write_atomic(path, json.dumps(document, indent=1, allow_nan=False))


def read_checkpoint(path: str, fingerprint: dict):
    """`(progress, arrays)` of the checkpoint at `path` if it was written by a call with this
    `fingerprint`; `None` if there is no file.

    **Raises:** `CheckpointError` naming the file: not a blamejax checkpoint, truncated or
    corrupt (bad JSON, wrong checksum, arrays that do not match their shapes), a newer
    format, or written by a call whose arguments differ (each differing argument named,
    with both values).
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"`checkpoint` file {path!r} cannot be read ({error})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise CheckpointError(
            f"`checkpoint` file {path!r} is truncated or corrupt (not valid JSON: {error}); delete it to start over"
        ) from None
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise CheckpointError(
            f'`checkpoint` file {path!r} is not a blamejax checkpoint (no "kind": {KIND!r}); '
            "pass another `checkpoint` path"
        )
    version = document.get("format")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT:
        raise CheckpointError(
            f"`checkpoint` file {path!r} has format {version}, newer than this blamejax reads "
            f"(format {FORMAT}); resume it with the blamejax that wrote it, or delete it to start over"
        )
    if version != FORMAT:
        raise CheckpointError(
            f"`checkpoint` file {path!r} has an unknown format {version!r} (expected {FORMAT})"
        )
    if document.get("sha256") != _checksum({k: v for k, v in document.items() if k != "sha256"}):
        raise CheckpointError(
            f"`checkpoint` file {path!r} is corrupt (its checksum does not match its content); "
            "delete it to start over"
        )
    differences = _differences(document.get("fingerprint"), _json_value(fingerprint))
    if differences:
        raise CheckpointError(
            f"`checkpoint` file {path!r} was written by a call with other arguments: "
            + "; ".join(differences)
            + f". {_START_OVER}"
        )
    try:
        arrays = {name: _decode(value) for name, value in document["arrays"].items()}
        progress = document["progress"]
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(
            f"`checkpoint` file {path!r} is corrupt ({error}); delete it to start over"
        ) from None
    return progress, arrays


def _checksum(document: dict) -> str:
    return hashlib.sha256(
        json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def _encode(array: np.ndarray) -> dict:
    little = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"), copy=False))
    return {
        "dtype": array.dtype.name,
        "shape": list(array.shape),
        "base64": base64.b64encode(little.tobytes()).decode(),
    }


def _decode(entry: dict) -> np.ndarray:
    dtype = np.dtype(entry["dtype"])
    raw = base64.b64decode(entry["base64"], validate=True)
    array = np.frombuffer(raw, dtype=dtype.newbyteorder("<"))  # raises if the size is off
    return array.reshape(entry["shape"]).astype(dtype)


def _differences(stored, current: dict) -> list[str]:
    if not isinstance(stored, dict):
        return ["the file holds no fingerprint"]
    out = []
    for name in current:
        if name not in stored:
            out.append(_MISSING.get(name, f"`{name}` is not in the file"))
        elif stored[name] != current[name]:
            out.append(_difference(name, stored[name], current[name]))
    out.extend(
        f"the file has `{name}`, this call does not" for name in stored if name not in current
    )
    return out


def _difference(name: str, stored, current) -> str:
    label = (
        f"the {name}"
        if " " in name or name.startswith("jax_") or name == "backend"
        else f"`{name}`"
    )
    if name == "cases" and isinstance(stored, dict) and isinstance(current, dict):
        return f"`cases` differ ({_tree_difference(stored, current)})"
    if name == "pipeline" and isinstance(stored, dict) and isinstance(current, dict):
        if stored.get("name") != current.get("name"):
            return (
                f"`pipeline` differs (file: {stored.get('name')}, this call: {current.get('name')})"
            )
        return f"`pipeline` {current.get('name')} differs (its code or the values it closes over changed)"
    return f"{label} differs (file: {_short(stored)}, this call: {_short(current)})"


def _tree_difference(stored: dict, current: dict) -> str:
    if stored.get("treedef") != current.get("treedef"):
        return f"another structure: file {_short(stored.get('treedef'))}, this call {_short(current.get('treedef'))}"
    for old, new in zip(stored.get("leaves", []), current.get("leaves", []), strict=False):
        for field in ("shape", "dtype"):
            if old.get(field) != new.get(field):
                return f"leaf {new['leaf']} has {field} {old.get(field)} in the file, {new.get(field)} in this call"
        if old != new:
            return f"leaf {new['leaf']} holds other values"
    return "another structure"


def _short(value, width: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + "..."


# --------------------------------------------------------------------------------------
# Ctrl-C.
# --------------------------------------------------------------------------------------


class _DeferredInterrupt:
    """A SIGINT handler that only records the signal (saying so on stderr)."""

    def __init__(self, name: str):
        self.name = name
        self.received = 0
        self.notice = f"{name}: Ctrl-C received; stopping after the current block of failures"

    def __call__(self, signum, frame):
        print(
            self.notice if not self.received else f"{self.name}: still finishing the current block",
            file=sys.stderr,
            flush=True,
        )
        self.received += 1


def defers_interrupts(function):
    """Run `function` with SIGINT only recorded (`interrupted()` says whether one came), the
    previous handler restored afterwards. Outside the main thread, where SIGINT is ignored,
    or inside another such call, it changes nothing."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return function(*args, **kwargs)
        previous = signal.getsignal(signal.SIGINT)
        if (
            previous is signal.SIG_IGN
            or previous is None
            or isinstance(previous, _DeferredInterrupt)
        ):
            return function(*args, **kwargs)
        signal.signal(signal.SIGINT, _DeferredInterrupt(function.__name__))
        try:
            return function(*args, **kwargs)
        finally:
            signal.signal(signal.SIGINT, previous)

    return wrapper


def interrupted(*after) -> bool:
    """Whether a SIGINT came during the current `defers_interrupts` call, once the arrays in
    `after` (if any) are computed: a signal that comes while they run is seen."""
    if after:
        jax.block_until_ready(after)
    handler = (
        signal.getsignal(signal.SIGINT)
        if threading.current_thread() is threading.main_thread()
        else None
    )
    return isinstance(handler, _DeferredInterrupt) and handler.received > 0


def interrupt_notice(text: str) -> None:
    """What the current `defers_interrupts` call prints on the first SIGINT."""
    handler = (
        signal.getsignal(signal.SIGINT)
        if threading.current_thread() is threading.main_thread()
        else None
    )
    if isinstance(handler, _DeferredInterrupt):
        handler.notice = text
