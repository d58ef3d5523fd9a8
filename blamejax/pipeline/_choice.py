"""What one draw chose (`Choice`) and the checks of one `ctx.choose` call
(`check_choose_args`), shared by the context that runs a pipeline and the recorder that
finds its structure."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int


class Choice(eqx.Module):
    """What one draw chose.

    - `index`: `Int[Array, ""]`, the chosen option (in relaxed mode, the most probable one).
    - `probs`: `Float[Array, "K"]` in relaxed mode, `None` in hard mode.
    - `num_options`: K.

    A context that defers its tabulated draws (`Context(defer=True)`) returns choices whose
    index is worked out the first time it is read (`_Deferred`).
    """

    _index: Int[Array, ""] | None
    probs: Float[Array, " K"] | None
    num_options: int = eqx.field(static=True)
    _deferred: Any = eqx.field(static=True, default=None)
    _reads: Any = eqx.field(static=True, default=None)

    def __init__(self, index, probs, num_options, deferred=None, reads=None):
        self._index = index
        self.probs = probs
        self.num_options = num_options
        self._deferred = deferred
        self._reads = reads

    @property
    def index(self) -> Int[Array, ""]:
        """The chosen option, an int32 scalar (a deferred draw is made the first time it is read)."""
        if self._deferred is not None:
            return self._deferred.value()
        return self._index

    def take(self, table):
        """Read `table[index]` (hard) or `probs @ table` (relaxed).

        `table` has the options on its first axis, `[K, ...]`. In relaxed mode it must be
        finite: a `-inf` entry gives `0 * -inf = NaN`, and the estimators refuse the NaN
        score with an error naming the failure and coalition.
        """
        table = jnp.asarray(table)
        if table.ndim == 0 or table.shape[0] != self.num_options:
            raise ValueError(
                f"`choice.take(table)` needs a table with the {self.num_options} options on "
                f"its first axis, got shape {table.shape}"
            )
        if self.probs is None:
            if self._reads is None:
                return table[self.index]
            return self._reads.take(table, self.index)
        return jnp.tensordot(self.probs.astype(table.dtype), table, axes=1)


def check_choose_args(step, logits, given, slot):
    """Validate one `ctx.choose` call; return (parents, tabulated)."""
    if not isinstance(step, str):
        raise TypeError(f"`step` must be a str name, got {type(step).__name__}: {step!r}")
    if not isinstance(slot, int) or slot < 0:
        raise TypeError(f"`slot` of step {step!r} must be a non-negative Python int, got {slot!r}")
    if not hasattr(logits, "shape") or not hasattr(logits, "dtype"):
        raise TypeError(f"logits of step {step!r} must be an array, got {type(logits).__name__}")
    if not jnp.issubdtype(logits.dtype, jnp.floating):
        raise TypeError(f"logits of step {step!r} must be floating point, got {logits.dtype}")
    if given is None:
        parents = ()
    elif isinstance(given, Choice):
        parents = (given,)
    elif isinstance(given, (tuple, list)) and all(isinstance(g, Choice) for g in given):
        parents = tuple(given)
    else:
        raise TypeError(
            f"`given` of step {step!r} must be a Choice or a tuple of Choices, "
            f"got {type(given).__name__}"
        )
    expected_ndim = 2 + len(parents)
    if logits.ndim != expected_ndim:
        want = "[V, " + "".join(f"K_parent{i}, " for i in range(len(parents))) + "K]"
        raise ValueError(
            f"logits of step {step!r} must have shape {want} ({expected_ndim} axes: variants, "
            f"{'one axis per parent, ' if parents else ''}options), got shape {logits.shape}"
            + _given_hint(step, logits.shape, len(parents))
        )
    for i, parent in enumerate(parents):
        if logits.shape[1 + i] != parent.num_options:
            raise ValueError(
                f"logits of step {step!r} have {logits.shape[1 + i]} rows on parent axis {i} "
                f"but the parent choice has {parent.num_options} options (shape {logits.shape})"
            )
    if logits.shape[0] < 1 or logits.shape[-1] < 1:
        raise ValueError(
            f"logits of step {step!r} need >= 1 variant and >= 1 option, got {logits.shape}"
        )
    return parents, bool(parents)


def _given_hint(step, shape, num_given: int) -> str:
    """What to add to a shape error of a step's logits: a table over parent choices whose
    `given=` is missing (or names too few parents), or a missing variant axis."""
    num_parent_axes = len(shape) - 2
    if len(shape) == 1 + num_given:
        return "; the first axis holds the variants (0 = factual): logits[None] for one variant"
    if num_parent_axes <= num_given:
        return ""
    if num_parent_axes == 1:
        axes, given = "V, K_parent, K", "parent"
    else:
        axes = ", ".join(["V", *(f"K_parent{i}" for i in range(num_parent_axes)), "K"])
        given = "(" + ", ".join(f"parent{i}" for i in range(num_parent_axes)) + ")"
    options = ", ".join(str(k) for k in shape[1:-1])
    if num_given == 0:
        return (
            f"; a table over parent choices, [{axes}], needs `given=` naming them: "
            f"ctx.choose({step!r}, logits, given={given}), the Choices it depends on "
            f"(with {options} options)"
        )
    return (
        f"; these logits have {num_parent_axes} parent axes [{axes}] but `given=` names "
        f"{num_given}: name one Choice per parent axis, given={given} (with {options} options)"
    )
