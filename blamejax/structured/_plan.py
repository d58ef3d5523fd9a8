"""Whether the structured path applies to a game (`structured_plan`): a tabulated pipeline,
hard mode, and a frontier and score table narrow enough to hold; else why not, in words.
And how its contraction runs: a chain's two scans, the general contraction as one scan over
the draws (`_scan`) for a long pipeline, or draw by draw."""

from __future__ import annotations

import math

from .._game import Game
from ..pipeline import Hard
from ._graph import find_graph
from ._multilinear import elimination
from ._scan import scan_layout

# The most joint options the frontier (or the score's table) may hold.
DEFAULT_MAX_STATES = 2**16

# The fewest draws for which a pipeline that is no chain runs its contraction as one scan
# (`_scan`): a program that does not grow with n. Shorter ones keep the contraction draw by
# draw, whose values are the same bit for bit as before the scan existed. On the skip-chain
# DAG the two compile in about the same CPU time at 16 draws (4.3 s and 4.7 s; 8 draws:
# 4.0 s and 3.3 s; 32 draws: 4.6 s and 8.4 s).
SCAN_MIN_SITES = 16


def structured_plan(game: Game, cases, max_states: int = DEFAULT_MAX_STATES):
    """`(elimination, graph, None)` when the structured path applies to `game`, else
    `(None, None, reason)`: why not, in words (a free-form step, a frontier or score table
    too wide, relaxed mode)."""
    structure = game.structure
    if not isinstance(game.mode, Hard):
        return None, None, "it runs in hard (Gumbel-max) mode only, and `mode` is relaxed"
    graph = find_graph(game.pipeline, structure, cases)

    def named(site):
        s = structure.sites[site]
        return repr(s.step) + (f" (slot {s.slot})" if s.slot else "")

    if graph.free:
        site, reads = graph.free[0]
        return (
            None,
            None,
            (
                f"step {named(site)} computes its logits from the option of "
                f"{', '.join(named(r) for r in reads)} by free JAX code (pass the parents with "
                "`given=` and a table with one axis per parent to make it tabulated)"
            ),
        )
    if graph.foreign:
        return (
            None,
            None,
            f"`given` of step {named(graph.foreign[0])} holds a choice its context did not return",
        )

    def states(scope):
        return math.prod(structure.sites[s].num_options for s in scope)

    factors = (graph.scope,)
    if (
        states(graph.scope) > max_states
    ):  # a product of factors, each multiplied in at its last site
        widest = max(graph.factors, key=states)
        if states(widest) > max_states:
            return (
                None,
                None,
                (
                    f"the score reads {len(graph.scope)} steps ({', '.join(named(s) for s in graph.scope)}), "
                    f"{states(graph.scope):,} joint options, above {max_states:,}, and its widest factor "
                    f"reads {len(widest)} of them ({states(widest):,} joint options)"
                ),
            )
        factors = graph.factors
    elim = elimination(structure, graph, list(game.players), list(game.fixes), factors)
    if elim.width > max_states:
        sites = [named(v) for v in elim.widest if v < len(structure.sites)]
        bits = len(elim.widest) - len(sites)
        what = ", ".join(sites) + (f" and {bits} fix bit(s)" if bits else "")
        m = 1 + -(-game.num_players // 2)
        need = elim.width * m * 4
        return (
            None,
            None,
            (
                f"its frontier is {len(elim.widest)} wide (the joint options of {what}: "
                f"{elim.width:,} states, above {max_states:,}; about {need / 2**20:,.0f} MiB per "
                "failure and world at each draw)"
            ),
        )
    if not elim.chain and len(elim.ops) >= SCAN_MIN_SITES:
        layout = scan_layout(elim)
        if layout is not None and layout.states <= max_states:
            elim = elim._replace(scan=True)
    return elim, graph, None
