"""`python -m blamejax blame TRACES ...`: from a tracer's files to blame in one command.

Import (a span file or folder, or a blamejax trace file) -> decisions (declared per agent or
span name in a JSON file; their factual logits from the calls' kept log-probabilities, or
scored from the recorded prompts) -> the fixes scored from the corrected prompts -> exact
blame under inferred noise -> the terminal table and a self-contained HTML report.

The decisions file is a JSON object, one entry per agent (or span name, with `--by span`):

    {"planner": {"options": ["search", "answer"], "accept": ["search"],
                 "fix": {"system": "Check the sources first. Answer with one word: ..."}}}

`fix.system` replaces the recorded system message in the fix's request, `fix.append` adds
to it; the scorer is asked the same request with the corrected prompt.
"""

from __future__ import annotations

import html
import json
import os
import warnings
from pathlib import Path

from . import traces
from .report import CAVEAT, write_atomic
from .scorers import Request, score_fixes

FIX_KEYS = ("system", "append")


class CommandError(ValueError):
    """A bad argument of the `blame` command, in the words of its flags."""


def read_json_file(path, flag: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as error:
        raise CommandError(f"{flag} {path}: cannot be read: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise CommandError(f"{flag} {path}: not valid JSON: {error}") from None


def check_decisions(spec, path) -> dict:
    """The decisions file checked: `{key: {"options": [...], "accept": [...], "fix": {...}}}`."""
    if not isinstance(spec, dict) or not spec:
        raise CommandError(
            f'--decisions {path}: expected a JSON object {{agent: {{"options": [...], '
            f'"accept": [...], "fix": {{"system": ...}}}}}}, got {json.dumps(spec)[:80]}'
        )
    for key, entry in spec.items():
        where = f"--decisions {path}: {key!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("options"), list):
            raise CommandError(
                f'{where}: expected {{"options": [...], ...}}, got {json.dumps(entry)[:80]}'
            )
        unknown = sorted(set(entry) - {"options", "accept", "fix"})
        if unknown:
            raise CommandError(f"{where}: unknown fields {unknown} (known: options, accept, fix)")
        fix = entry.get("fix")
        if fix is not None and (
            not isinstance(fix, dict)
            or len(fix) != 1
            or next(iter(fix)) not in FIX_KEYS
            or not isinstance(next(iter(fix.values())), str)
        ):
            raise CommandError(
                f'{where}: "fix" must be {{"system": "the corrected system message"}} or '
                f'{{"append": "text added to the system message"}}, got {json.dumps(fix)[:80]}'
            )
    return spec


def import_traces(path, outcomes, convention: str):
    """Runs from `path`: a blamejax trace file (read as it is), else spans, read by the
    MLflow, OpenInference or OpenTelemetry GenAI importer (`convention`, or by what the files
    hold: MLflow's `mlflow.spanType`, else OpenInference's `openinference.span.kind`
    anywhere picks it)."""
    path = Path(path)
    if not path.exists():
        raise CommandError(f"TRACES {path}: no such file or folder")
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    head = "".join(f.read_text(encoding="utf-8", errors="replace") for f in files[:50])
    if '"format": "blamejax-trace' in head or '"format":"blamejax-trace' in head:
        if outcomes:
            raise CommandError("--outcomes: a blamejax trace file carries its outcomes")
        return traces.read(path)
    if convention == "auto":
        convention = (
            "mlflow"
            if "mlflow.spanType" in head
            else "openinference"
            if "openinference.span.kind" in head
            else "otel"
        )
    importer = {
        "mlflow": traces.from_mlflow,
        "openinference": traces.from_openinference,
        "otel": traces.from_otel,
    }[convention]
    return importer(path, outcomes=outcomes)


def fix_request(spec, by: str):
    """The request of a step's fix: its recorded prompt with the corrected system message."""

    def request(run, step, variant, parent):
        key = step.agent if by == "agent" else (step.extra.get("name") or step.name)
        fix = (spec.get(key) or spec.get(step.name) or {}).get("fix")
        if fix is None:
            raise CommandError(
                f'--decisions: {key!r} has no "fix"; give each decision the corrected system '
                'message ({"fix": {"system": ...}}) for the scorer to score the fix'
            )
        messages = traces.prompt_of(step)
        if messages is None:
            raise CommandError(
                f"run {run.run!r}, step {step.name!r}: it kept no prompt to correct (record the "
                "content: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY)"
            )
        system = [i for i, m in enumerate(messages) if m["role"] == "system"]
        if "system" in fix:
            text = fix["system"]
        else:
            text = (messages[system[0]]["content"] + " " if system else "") + fix["append"]
        if system:
            messages[system[0]] = {"role": "system", "content": text}
        else:
            messages.insert(0, {"role": "system", "content": text})
        inputs = {"agent": step.agent, "messages": messages}
        return Request(step.name, variant, inputs, step.options)

    return request


def blame_traces(
    path,
    *,
    decisions,
    scorer,
    outcomes=None,
    by: str = "agent",
    factual: str = "scorer",
    convention: str = "auto",
    num_worlds: int = 8,
    seed: int = 0,
    progress: bool = True,
):
    """Import, declare, score and blame. Returns `(rows, blames)`: one row per run (its id,
    outcome, who, when, earliest repair, per-step values, note) and each group's
    `TraceBlame`."""
    runs = import_traces(path, outcomes, convention)
    options = {k: v["options"] for k, v in decisions.items()}
    accept = {k: v["accept"] for k, v in decisions.items() if "accept" in v}
    if factual == "logprobs":
        if by != "agent":
            raise CommandError("--factual logprobs declares decisions by agent only (--by agent)")
        runs = traces.decisions_from_logprobs(runs, options, accept=accept)
    else:
        runs = traces.declare_decisions(runs, options, accept=accept, by=by)
        runs = traces.score_decisions(runs, scorer, progress=progress)
    request = fix_request(decisions, by)
    if progress:
        from tqdm.auto import tqdm

        scored = [
            score_fixes([run], scorer, request)[0]
            for run in tqdm(runs, desc="scoring fixes", unit="run")
        ]
    else:
        scored = score_fixes(runs, scorer, request)
    rows, blames = [], []
    for group in traces.group_runs(scored):
        with warnings.catch_warnings():  # the table's note says it
            warnings.simplefilter("ignore", traces.FailureOutsideDecisionsWarning)
            out = traces.blame_runs(group, key=seed, num_worlds=num_worlds)
        blames.append(out)
        for f, run in enumerate(group):
            read = traces.readout(out.result, out.cases.agent_map, failure=f)
            outcome = (
                "passed"
                if run.passed
                else ("failed" if run.passed is False else f"score {run.score:g}")
            )
            note = ""
            if run.run in out.outside:
                note = "failed outside the declared decisions"
            elif run.run in out.mismatched:
                note = "recorded outcome differs from its decisions' score"
            rows.append(
                dict(
                    run=run.run,
                    outcome=outcome,
                    who=read.who,
                    when=read.when,
                    repair=read.earliest_repair,
                    values=list(zip(read.steps, read.agents, map(float, read.per_step))),
                    note=note,
                )
            )
    blamed = {row["run"] for row in rows}
    for run in scored:
        if run.run not in blamed:
            rows.append(
                dict(
                    run=run.run,
                    outcome="",
                    who=(),
                    when=(),
                    repair=None,
                    values=[],
                    note="no decision to blame",
                )
            )
    return rows, blames


def _cells(r) -> tuple:
    """One run's row, as both the terminal table and the HTML page show it."""
    who, when = ", ".join(r["who"]) or "-", ", ".join(r["when"]) or "-"
    return (r["run"], r["outcome"], who, when, r["repair"] or "-", r["note"])


def table(rows) -> str:
    """The terminal table: one line per run, then each run's per-step values."""
    heads = ("run", "outcome", "who", "when", "earliest repair", "note")
    cells = [_cells(r) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    line = lambda c: "  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip()  # noqa: E731
    out = [line(heads), line(["-" * w for w in widths]), *map(line, cells), ""]
    for r in rows:
        if r["values"]:
            out.append(f"{r['run']}: Shapley value per decision")
            out += [
                f"  {step:<30} {agent or '-':<16} {value:+.4f}"
                for step, agent, value in r["values"]
            ]
    out += ["", CAVEAT]
    return "\n".join(out)


def page(rows, source: str) -> str:
    """The HTML report: a self-contained page with the same table and values."""
    e = html.escape
    body = [
        "<!doctype html><html><head><meta charset='utf-8'><title>blamejax: blame of traced runs</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
        "td.num{text-align:right;font-variant-numeric:tabular-nums}</style></head><body>",
        f"<h1>Blame of traced runs</h1><p>Traces: <code>{e(source)}</code></p>",
        "<table><tr><th>run</th><th>outcome</th><th>who</th><th>when</th>"
        "<th>earliest repair</th><th>note</th></tr>",
    ]
    for r in rows:
        body.append("<tr>" + "".join(f"<td>{e(x)}</td>" for x in _cells(r)) + "</tr>")
    body.append("</table>")
    for r in rows:
        if not r["values"]:
            continue
        body.append(
            f"<h2>{e(r['run'])}</h2><table><tr><th>decision</th><th>agent</th><th>Shapley value</th></tr>"
        )
        body += [
            f"<tr><td>{e(step)}</td><td>{e(agent or '-')}</td><td class='num'>{value:+.4f}</td></tr>"
            for step, agent, value in r["values"]
        ]
        body.append("</table>")
    body.append(f"<p><em>{e(CAVEAT)}</em></p></body></html>")
    return "\n".join(body)


def write_page(rows, source, out) -> str:
    out = os.fspath(out)
    write_atomic(out, page(rows, source))
    return out
