"""What a researcher who wrote a small agent from the README and the guides alone tripped on:
doubled punctuation after the noise mode's question, a harmful step called the largest blame,
the interactive page in another order than every other view, overlapping labels in the
scatter plot, and a README that never showed a step with two parents nor named the plans."""

import html
import json
import pathlib
import re

import jax.numpy as jnp
import numpy as np
import pytest

import blamejax as bj

ROOT = pathlib.Path(__file__).resolve().parent.parent
SURE = jnp.array([[0.0, -jnp.inf], [-jnp.inf, 0.0]])  # variant 0 picks option 0, its fix option 1
STEPS = ("plan", "search", "draft", "review")


def _sure_cases(num_cases: int, **tables):
    """Every step draws option 0 as it ran and option 1 under its fix, in every world."""
    cases = {step: jnp.tile(SURE, (num_cases, 1, 1)) for step in STEPS}
    cases.update(
        {k: jnp.tile(jnp.asarray(v), (num_cases,) + (1,) * np.ndim(v)) for k, v in tables.items()}
    )
    return cases


def additive(ctx, case):
    """Each step's fix adds its own gain to the score: its Shapley value is that gain."""
    score = 0.0
    for i, step in enumerate(STEPS):
        score = score + ctx.choose(step, case[step]).take(case["gain"][i])
    return score


def _additive_result(gains, **kwargs):
    gain = np.stack([np.zeros(len(gains)), np.asarray(gains)], axis=1).astype(np.float32)
    return bj.blame_batch(additive, _sure_cases(3, gain=gain), 0, **kwargs)


# ---------------------------------------------------------------------------------------
# 1. The noise mode's question reads as one sentence.
# ---------------------------------------------------------------------------------------

DOUBLED = re.compile(r"[?!:][.:;,]|(?<!\.)\.\.(?!\.)")


def _prose(page: str) -> str:
    """A page's text without its scripts, styles, chart and embedded data."""
    page = re.sub(r"<(script|style|svg)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


@pytest.mark.parametrize("noise", ["recorded", "fresh"])
def test_the_question_is_not_followed_by_doubled_punctuation(noise):
    result = bj.blame_batch(
        bj.demos.refund_pipeline,
        bj.demos.refund_cases(20),
        0,
        noise=noise,
        num_worlds=2,
        keep_coalitions=True,
    )
    views = {
        "table": result.table(),
        "html": _prose(result.to_html()),
        "fragment": _prose(result._repr_html_()),
        "interactive": _prose(result.to_html(interactive=True)),
    }
    for name, text in views.items():
        assert result.question[1:60] in text, name  # the question is there (capitalised)
        assert not DOUBLED.findall(text), (name, DOUBLED.findall(text))


# ---------------------------------------------------------------------------------------
# 2. A failure that every fix makes worse has no largest blame.
# ---------------------------------------------------------------------------------------


def two_steps(ctx, case):
    draft = ctx.choose("draft", case["draft"])
    review = ctx.choose("review", case["review"])
    return review.take(draft.take(case["score"]))  # score[draft, review]


def test_a_failure_that_fixing_makes_worse_names_no_step_as_largest_blame():
    # score[draft, review]: 0.5 as it ran; fixing the draft gives 0.4, the review 0.1, both 0.
    cases = dict(draft=jnp.tile(SURE, (3, 1, 1)), review=jnp.tile(SURE, (3, 1, 1)))
    cases["score"] = jnp.tile(jnp.array([[0.5, 0.1], [0.4, 0.0]]), (3, 1, 1))
    result = bj.blame_batch(two_steps, cases, 0)
    np.testing.assert_allclose(result.shapley, [[-0.1, -0.4]] * 3, atol=1e-6)
    assert result.largest_blame == ((), (), ())
    assert result.to_dict()["largest_blame"] == [[], [], []]
    labels = re.findall(r'<span class="largest">([^<]*)</span>', result.to_html())
    assert len(labels) == 3
    for label in labels:
        assert label.startswith("none") and "worse" in label and "no step helps" in label
        assert "most harmful fix: review" in label  # the most negative Shapley value
    summary = result.table()
    assert "one step in 0, tied steps in 0, none (zero total repair) in 0" in summary
    assert "no step helps (fixing makes the run worse) in 3" in summary
    # A step whose fix helps is still named when fixing every step hurts.
    phi = np.array([[0.2, -0.5], [-0.1, -0.4], [0.0, -0.3]])
    out = bj.report.largest_blame(phi, phi.sum(1), ("draft", "review"), (0.0, 1.0))
    assert out == (("draft",), (), ())


# ---------------------------------------------------------------------------------------
# 3. The interactive page lists the steps as every other view does.
# ---------------------------------------------------------------------------------------


def test_interactive_page_uses_the_reports_step_order():
    result = _additive_result([0.1, 0.2, 0.3, 0.35], keep_coalitions=True)
    assert result.step_order == ("review", "draft", "search", "plan")  # not pipeline order
    page = result.to_html(interactive=True)
    payload = re.search(r'<script type="application/json" id="bj-data">(.*?)</script>', page, re.S)
    data = json.loads(payload.group(1))
    assert data["steps"] == list(result.steps)  # the coalition bits follow the pipeline
    assert [data["steps"][i] for i in data["order"]] == list(result.step_order)
    # The static report, for comparison.
    assert re.findall(r'<tr data-step="([^"]+)">', result.to_html()) == list(result.step_order)


# ---------------------------------------------------------------------------------------
# 4. The scatter plot's labels do not overlap.
# ---------------------------------------------------------------------------------------


def test_scatter_labels_do_not_overlap():
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    result = _additive_result([0.24, 0.241, 0.242, 0.243])  # four points almost on one spot
    figure = result.plot("scatter")
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    labels = [t for t in figure.axes[0].texts if t.get_text() in STEPS]
    assert sorted(t.get_text() for t in labels) == sorted(STEPS)
    boxes = [t.get_window_extent(renderer) for t in labels]
    for i in range(len(boxes)):
        for j in range(i):
            assert not boxes[i].overlaps(boxes[j]), (labels[i].get_text(), labels[j].get_text())
    # Drawing again (a notebook redraws) places them the same way.
    canvas.draw()
    again = [t.get_window_extent(renderer) for t in labels]
    assert [tuple(b.bounds) for b in again] == [tuple(b.bounds) for b in boxes]


# ---------------------------------------------------------------------------------------
# 5. The README shows a step with two parents and a score over two steps, and names the plans.
# ---------------------------------------------------------------------------------------

BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_readme_runs_a_step_with_two_parents_and_a_score_over_two_steps():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    blocks = [b for b in BLOCK.findall(readme) if re.search(r"given=\(\w+, \w+\)", b)]
    assert len(blocks) == 1, "README.md has no python block with a two-parent step"
    code = blocks[0]
    assert "# doctest: skip" not in code and "# doctest: slow" not in code
    assert re.search(r"\w+\.take\(\w+\.take\(", code) or re.search(
        r"\[\w+\.index, \w+\.index\]", code
    )
    namespace = {"__name__": "__docs__"}
    exec(compile(code, "<README.md, the two-parent block>", "exec"), namespace)  # on its own
    structure = bj.discover(namespace["triage"], {k: v[0] for k, v in namespace["cases"].items()})
    assert any(len(site.parent_options) == 2 and site.tabulated for site in structure.sites)


def test_structure_plan_and_coalition_plan_are_named_and_linked():
    readme = (ROOT / "README.md").read_text()
    for name, page in (
        ("Structure", "docs/api/pipeline.md"),
        ("Plan", "docs/api/pipeline.md"),
        ("coalition_plan", "docs/api/coalitions.md"),
    ):
        assert re.search(rf"\[`(bj\.[\w.]*)?{name}`\]\({re.escape(page)}", readme), name
        assert (ROOT / page).exists()
    guide = (ROOT / "docs/architecture.md").read_text()
    for name, page in (
        ("Structure", "api/pipeline.md"),
        ("Plan", "api/pipeline.md"),
        ("coalition_plan", "api/coalitions.md"),
    ):
        assert re.search(rf"\[`(bj\.[\w.]*)?{name}`\]\({re.escape(page)}", guide), name
    assert bj.Structure is bj.pipeline.Structure and bj.Plan is bj.pipeline.Plan
    assert callable(bj.coalitions.coalition_plan)


# ---------------------------------------------------------------------------------------
# 6. Case ids travel with the cases: a count where the ids belong is refused, and results
#    carry the ids they were given and look failures up by them.
# ---------------------------------------------------------------------------------------


def _refund_failures(num_cases=24):
    cases = bj.demos.refund_cases(num_cases)
    scores = bj.replay(bj.demos.refund_pipeline, cases, bj.recorded_worlds(0, range(num_cases)))
    failed = np.flatnonzero(np.asarray(scores["score"][:, 0]) < 1)
    assert failed.size >= 3 and failed[1] != 1  # ids and positions differ
    return {name: value[failed] for name, value in cases.items()}, failed


@pytest.mark.parametrize("make", [bj.recorded_worlds, lambda k, ids: bj.fresh_worlds(k, ids, 2)])
def test_a_count_where_the_ids_belong_is_refused(make):
    _, failed = _refund_failures()
    with pytest.raises(TypeError, match=r"got the bare int \d+; .*range\(\d+\).*not their count"):
        make(0, len(failed))
    with pytest.raises(TypeError, match="bare int"):
        make(0, np.int64(3))


def test_results_carry_the_case_ids_and_look_failures_up_by_them():
    cases, failed = _refund_failures()
    worlds = bj.recorded_worlds(0, failed)
    np.testing.assert_array_equal(np.asarray(worlds.case_id)[:, 0], failed)
    exact = bj.exact_blame(bj.demos.refund_pipeline, cases, worlds)
    mc = bj.mc_shapley(bj.demos.refund_pipeline, cases, worlds, 0, max_evaluations=200)
    for result in (exact, mc):
        np.testing.assert_array_equal(result.case_ids, failed)
        assert result.row(int(failed[1])) == 1
        with pytest.raises(ValueError, match=r"`case` must be the id of a failure.*case ids are"):
            result.table(1)  # a position, not an id
    # The carried ids change nothing computed: the same numbers as worlds without them.
    bare = bj.World(key=worlds.key)
    np.testing.assert_array_equal(
        exact.shapley, bj.exact_blame(bj.demos.refund_pipeline, cases, bare).shapley
    )
    assert exact.table(int(failed[1])) != exact.table(int(failed[0])) or np.array_equal(
        exact.shapley[0], exact.shapley[1]
    )
    first = bj.exact_blame(
        bj.demos.refund_pipeline,
        {k: v[1:2] for k, v in cases.items()},
        bj.recorded_worlds(0, failed[1:2]),
    )
    assert first.table(int(failed[1])) == exact.table(int(failed[1]))
    # A JSON round trip keeps them.
    again = bj.ExactResult.from_dict(json.loads(json.dumps(exact.to_dict())))
    np.testing.assert_array_equal(again.case_ids, failed)


def test_a_not_a_failure_warning_names_case_ids():
    cases = bj.demos.refund_cases(24)
    scores = bj.replay(bj.demos.refund_pipeline, cases, bj.recorded_worlds(0, range(24)))
    passed = np.flatnonzero(np.asarray(scores["score"][:, 0]) >= 1)[:2]
    sub = {name: value[passed] for name, value in cases.items()}
    with pytest.warns(
        bj.estimators.NotAFailureWarning, match=rf"case ids {passed[0]}, {passed[1]}"
    ):
        bj.exact_blame(bj.demos.refund_pipeline, sub, bj.recorded_worlds(0, passed))


# ---------------------------------------------------------------------------------------
# 7. Monte Carlo bounds stay in the possible range; all-zero marginals are named.
# ---------------------------------------------------------------------------------------


def _with_a_silent_step(ctx, case):
    """`search` is drawn but never changes the score: every marginal of it is exactly 0."""
    ctx.choose("search", case["search"])
    score = ctx.choose("plan", case["plan"]).take(case["gain"][0])
    return score + ctx.choose("draft", case["draft"]).take(case["gain"][1])


def test_monte_carlo_bounds_stay_in_the_possible_range_and_silent_steps_are_named():
    gain = jnp.array([[0.0, 0.6], [0.0, 0.4]])
    cases = _sure_cases(2, gain=gain)
    result = bj.mc_shapley(
        _with_a_silent_step,
        cases,
        bj.recorded_worlds(0, range(2)),
        0,
        max_evaluations=60,
        history=True,
    )
    high = result.score_range[1] - result.score_range[0]
    assert np.asarray(result.upper).max() <= high and np.asarray(result.lower).min() >= -high
    assert np.nanmax(np.asarray(result.history.upper)) <= high
    assert np.nanmin(np.asarray(result.history.lower)) >= -high
    # The unclipped interval of so few samples would pass the range: the clip did something.
    assert np.isclose(np.asarray(result.upper).max(), high)
    column = list(result.steps).index("search")
    assert np.all(np.asarray(result.values)[:, column] == 0)
    table = result.table(1)
    assert "every sampled marginal of search was exactly 0" in table
    assert "plan" not in table.splitlines()[-1]
