"""Strict JSON for results, and atomic writes of every file the library writes.

**The encoding.** A result (`ExactResult`, `MCResult` with its optional `MCHistory`,
`BatchResult`, `ContrastiveResult`) becomes one JSON object:

- `"type"`: the class name (checked when read back) and `"format"`: `1`;
- one key per field, in field order. Array fields are nested lists; a nested result (the
  `MCHistory` of an `MCResult`) is a nested object of the same form; `None` is `null`;
  tuples are lists (read back as tuples); dicts stay objects;
- `"arrays"`: `{field: {"dtype": "float32", "shape": [3, 4], "jax": true}}` for every array
  field, enough to rebuild it bit for bit (dtype and shape, an empty array included, and
  whether it was a JAX or a NumPy array);
- numbers that JSON cannot hold: NaN is `null`, +inf and -inf are the strings `"inf"` and
  `"-inf"` (inside arrays, and anywhere in a plain tree given to `write_json`). A static
  setting that is not finite is an error: it could not be told apart from a string.

The text is written with `allow_nan=False`, so a bare `NaN` or `Infinity` token (not JSON:
`jq` and `JSON.parse` reject it) is never written, and `read_json` refuses one.

**Atomic writes.** `write_atomic` writes to a temporary file in the destination's folder and
renames it into place with `os.replace`: an export that fails or is interrupted half way
leaves an existing file as it was.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import uuid
from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np

FORMAT = 1
_NUMBER_KINDS = "biuf"  # bool, signed and unsigned int, float


def write_atomic(path, text: str | Iterable[str]) -> None:
    """Write `text` (a string, or an iterable of string chunks) to `path` atomically.

    The text goes to a new temporary file in the same folder, which is flushed to disk and
    renamed over `path` with `os.replace`; on any error the temporary file is removed and
    an existing `path` is left byte for byte as it was. A new file gets the permissions
    `open(path, "w")` would give it; an existing one keeps its own. Text is UTF-8.

    **Raises:** whatever writing or the iterable raises (after cleaning up).
    """
    given = os.fspath(path)
    path = os.path.realpath(given)  # through a symlink, as `open` writes
    folder, name = os.path.split(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot write {given!r}: it is a folder; give a file path")
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot write {given!r}: its folder {folder!r} does not exist")
    tmp = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:12]}.tmp")
    chunks = (text,) if isinstance(text, str) else text
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 & ~umask
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _number(x: float):
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def json_ready(value):
    """A plain tree (dicts, lists, tuples, numbers, strings, `None`, NumPy/JAX arrays and
    scalars) as one JSON can hold: NaN -> `None`, +-inf -> `"inf"`/`"-inf"`, arrays and
    tuples -> lists, NumPy scalars -> Python numbers."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, (np.ndarray, jax.Array, np.generic)):
        return _encode_array(np.asarray(value))
    if isinstance(value, float):
        return _number(value)
    return value


def _encode_array(array: np.ndarray):
    if array.dtype.kind not in _NUMBER_KINDS:
        raise TypeError(f"cannot write an array of dtype {array.dtype} as JSON")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        cells = array.astype(object)
        cells[np.isnan(array)] = None
        cells[np.isposinf(array)] = "inf"
        cells[np.isneginf(array)] = "-inf"
        return cells.tolist()
    return array.tolist()


def _decode_cells(value):
    if isinstance(value, list):
        return [_decode_cells(v) for v in value]
    if value is None:
        return math.nan
    if value == "inf":
        return math.inf
    if value == "-inf":
        return -math.inf
    return value


def _as_tuples(value):
    """Lists back to the tuples a result's static fields hold."""
    if isinstance(value, list):
        return tuple(_as_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _as_tuples(v) for k, v in value.items()}
    return value


def _check_static(value, where: str):
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"cannot write the non-finite setting `{where}` = {value!r} as JSON")
    if isinstance(value, (list, tuple)):
        for v in value:
            _check_static(v, where)
    if isinstance(value, dict):
        for v in value.values():
            _check_static(v, where)


def result_to_dict(result) -> dict:
    """A result (an `eqx.Module` of arrays and static settings) as a JSON-ready dict:
    `"type"`, `"format"`, one key per field (arrays as nested lists, NaN -> `None`, +-inf ->
    `"inf"`/`"-inf"`) and `"arrays"`, each array field's dtype, shape and kind.
    `result_from_dict` reads it back.

    **Raises:** `ValueError` for a non-finite static setting, `TypeError` for an array
    that is not of bools or numbers.
    """
    out = {"type": type(result).__name__, "format": FORMAT}
    arrays = {}
    for field in dataclasses.fields(result):
        value = getattr(result, field.name)
        if isinstance(value, (np.ndarray, jax.Array)):
            array = np.asarray(value)
            arrays[field.name] = {
                "dtype": array.dtype.name,
                "shape": list(array.shape),
                "jax": isinstance(value, jax.Array),
            }
            out[field.name] = _encode_array(array)
        elif dataclasses.is_dataclass(value):
            out[field.name] = result_to_dict(value)
        else:
            _check_static(value, f"{type(result).__name__}.{field.name}")
            out[field.name] = json_ready(value)
    out["arrays"] = arrays
    return out


def result_from_dict(cls, data: dict, **nested):
    """The result of class `cls` that `result_to_dict` wrote as `data`: arrays with their
    dtype and shape, static settings as tuples where the class holds tuples. `nested` names
    the class of each nested result field (`history=MCHistory`).

    **Raises:** `ValueError` when `data` is of another type or format, or lacks or adds
    fields.
    """
    if not isinstance(data, dict) or data.get("type") != cls.__name__:
        if not isinstance(data, dict):
            got = f"a {type(data).__name__}"
        elif "type" not in data:
            got = f'a dict without "type" (keys {sorted(data)[:6]})'
        else:
            got = f"{data['type']!r}"
        raise ValueError(f"expected a dict of type {cls.__name__!r}, got {got}")
    if data.get("format") != FORMAT:
        raise ValueError(f"unknown {cls.__name__} format {data.get('format')!r}, expected {FORMAT}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    extra = sorted(set(data) - set(fields) - {"type", "format", "arrays"})
    if extra:
        raise ValueError(f"{cls.__name__} has no fields {extra}")
    arrays = data.get("arrays")
    if not isinstance(arrays, dict):
        raise ValueError(
            f'the {cls.__name__} dict lacks "arrays" (the dtype and shape of each array field), '
            f"got {arrays!r:.80}"
        )
    kwargs = {}
    for name, field in fields.items():
        if name not in data:
            if field.default is dataclasses.MISSING:
                raise ValueError(f"the {cls.__name__} dict lacks the field {name!r}")
            continue
        value = data[name]
        if name in arrays:
            meta = arrays[name]
            try:
                dtype = np.dtype(meta["dtype"])
                array = np.asarray(_decode_cells(value), dtype=dtype).reshape(meta["shape"])
            except (KeyError, TypeError, ValueError) as error:
                raise ValueError(
                    f'the {cls.__name__} field {name!r} does not match its entry under "arrays" '
                    f"{meta!r:.80} ({error})"
                ) from None
            # A JAX array comes back as one, unless this JAX cannot hold its dtype (a
            # float64 array read without x64): then it stays NumPy rather than be narrowed.
            if meta.get("jax") and jax.dtypes.canonicalize_dtype(dtype) == dtype:
                array = jnp.asarray(array)
            kwargs[name] = array
        elif value is not None and name in nested:
            kwargs[name] = result_from_dict(nested[name], value)
        else:
            kwargs[name] = _as_tuples(value)
    return cls(**kwargs)


def write_json(path, data) -> None:
    """Write `data` (a plain tree or a result's `to_dict()`) to `path` as strict JSON
    (NaN -> `null`, +-inf -> `"inf"`/`"-inf"`), atomically (`write_atomic`)."""
    encoder = json.JSONEncoder(indent=1, allow_nan=False)
    write_atomic(path, encoder.iterencode(json_ready(data)))


def _refuse_constant(token: str):
    raise ValueError(f"not strict JSON: the bare token {token} (blamejax writes NaN as null)")


def read_json(path):
    """Read a strict JSON file (a bare `NaN`, `Infinity` or `-Infinity` token is an error).

    **Raises:** `TypeError` for a `path` that is not a path; `FileNotFoundError` or
    `IsADirectoryError` naming it; `ValueError` naming the file when it is not strict JSON.
    """
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"`path` must be a file path (str or os.PathLike), got {path!r:.80}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"`path` {os.fspath(path)!r} is a folder; expected a JSON file")
    if not os.path.exists(path):
        raise FileNotFoundError(f"`path` {os.fspath(path)!r}: no such file")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        what = "is empty" if not text.strip() else f"is not valid JSON ({error})"
        raise ValueError(
            f"{os.fspath(path)!r} {what}; expected a file that `to_json` wrote"
        ) from None
    except ValueError as error:
        raise ValueError(f"{os.fspath(path)!r}: {error}") from None


class JSONExport:
    """The strict-JSON methods every result class shares (a mixin for `eqx.Module` results):
    `to_dict()`, `to_json(path)` (atomic), `from_dict(data)` and `load_json(path)`, equal bit
    for bit after a round trip. A class with a nested result field names it in `_nested()`."""

    def to_dict(self) -> dict:
        """Every field as plain Python values, ready for strict JSON: arrays as nested lists,
        NaN as `None`, +-inf as `"inf"`/`"-inf"`, with `"type"` and each array's dtype and
        shape under `"arrays"` (`result_to_dict`)."""
        return result_to_dict(self)

    def to_json(self, path) -> None:
        """Write `to_dict()` to `path` as strict JSON (never a bare `NaN` or `Infinity`
        token), atomically: a failed write leaves an existing file as it was."""
        write_json(path, self.to_dict())

    @classmethod
    def _nested(cls) -> dict:
        return {}

    @classmethod
    def from_dict(cls, data: dict):
        """The result `to_dict()` gave: arrays equal bit for bit (dtype and shape)."""
        return result_from_dict(cls, data, **cls._nested())

    @classmethod
    def load_json(cls, path):
        """Read a file `to_json` wrote."""
        return cls.from_dict(read_json(path))
