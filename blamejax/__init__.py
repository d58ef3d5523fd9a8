"""blamejax: which step of a failed stochastic pipeline is to blame, by counterfactual replay.

The package is arranged in the order the computation flows:

1. `pipeline`: write a pipeline (`ctx.choose`), its plans and structure, single runs;
2. `noise` and `worlds`: its luck — addressed Gumbel noise, and the recorded, fresh or
   inferred worlds a failure is replayed in;
3. `coalitions`: the score of every coalition of fixes (and of Monte Carlo prefixes);
4. `reduction`: coalition scores to Shapley values and the simpler rules; beside these two,
   `structured`: the same attributions from the game's multilinear extension, without a
   coalition table (exact past 20 steps);
5. `stats`: confidence radii, looks, stopping rules and intervals;
6. `estimators`: exact blame, Monte Carlo Shapley, batch blame over a test set;
7. `report`: text, JSON, pandas and HTML reports;

then the families built on them (`interventions`, `differentiable`, `mdp`) and the
applications beside them, each loaded on first use (`bj.traces`, ...): `traces` (real runs:
the trace format and its importers), `scorers` (decisions of real runs scored by real
models, cached), `benchmarks` (attribution methods side by side on failures whose culprit
is known: synthetic causal models, `benchmarks.scm`, and labelled real runs,
`benchmarks.whowhen`), `demos`; and the command line `python -m blamejax`.
The names below are the front door; everything else lives in those namespaces.
"""

from . import coalitions as coalitions
from . import differentiable as differentiable
from . import estimators as estimators
from . import interventions as interventions
from . import mdp as mdp
from . import noise as noise
from . import pipeline as pipeline
from . import reduction as reduction
from . import report as report
from . import stats as stats
from . import worlds as worlds
from ._compile import clear_caches as clear_caches
from ._compile import enable_compile_cache as enable_compile_cache
from ._game import Game as Game
from .differentiable import FitResult as FitResult
from .differentiable import fit_fixes as fit_fixes
from .differentiable import shapley_values as shapley_values
from .estimators import BatchResult as BatchResult
from .estimators import ExactResult as ExactResult
from .estimators import MCResult as MCResult
from .estimators import blame_batch as blame_batch
from .estimators import exact_blame as exact_blame
from .estimators import mc_shapley as mc_shapley
from .interventions import contrastive as contrastive
from .pipeline import Choice as Choice
from .pipeline import Hard as Hard
from .pipeline import Plan as Plan
from .pipeline import Relaxed as Relaxed
from .pipeline import Structure as Structure
from .pipeline import World as World
from .pipeline import discover as discover
from .reduction import Attribution as Attribution
from .reduction import attribute as attribute
from .worlds import ExpectedWorlds as ExpectedWorlds
from .worlds import expected_worlds as expected_worlds
from .worlds import fresh_worlds as fresh_worlds
from .worlds import inferred_worlds as inferred_worlds
from .worlds import recorded_worlds as recorded_worlds
from .worlds import replay as replay

__version__ = "0.1.0"


# The applications load on first use (`bj.traces`, `bj.scorers`, `bj.benchmarks`, `bj.demos`),
# so that `import blamejax` costs only the library. They are written with the front door
# (`import blamejax as bj`), so importing them here would also run back up the house.
# `scm` moved to `benchmarks.scm`; `bj.scm` still loads (its names re-exported), unlisted.
_APPLICATIONS = ("benchmarks", "demos", "scorers", "traces")
_MOVED = ("scm",)


def __getattr__(name: str):
    if name in _APPLICATIONS or name in _MOVED:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'blamejax' has no attribute {name!r}")


def __dir__():
    return sorted((set(globals()) | set(_APPLICATIONS)) - set(_MOVED))  # moved: unlisted
