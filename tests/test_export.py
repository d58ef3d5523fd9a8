"""Exports that are never silently wrong: every result type round-trips through strict JSON
(NaN -> null, +-inf -> "inf"/"-inf", arrays with their dtype and shape), and every file the
library writes is written atomically (a failed write leaves an existing file as it was)."""

import dataclasses
import json
import os

import jax
import numpy as np
import pytest

import blamejax as bj
from blamejax.estimators import MCHistory
from blamejax.interventions import ContrastiveResult


def _strict_loads(text):
    def refuse(token):
        raise ValueError(f"bare {token} token")

    return json.loads(text, parse_constant=refuse)


def _all_passing_cases(num_cases=8):
    """Refund cases whose planner always plans right: every run then passes."""
    cases = bj.demos.refund_cases(num_cases)
    return dict(cases, planner=cases["planner"][:, np.array([1, 1])])


@pytest.fixture(scope="module")
def results():
    """One small result of each type (each estimator compiles once: the file stays fast)."""
    refund, rag = bj.demos.refund_pipeline, bj.demos.rag_pipeline
    cases = bj.demos.refund_cases(30)
    names = {"writer": ("correct", "wrong uncited", "wrong cited")}
    # One analysed failure: the interval of the mean Shapley value is infinite.
    one_failure = bj.blame_batch(refund, cases, 0, max_failures=1, option_names=names)
    ids = np.asarray(one_failure.failure_ids)
    failure = jax.tree_util.tree_map(lambda x: x[ids], cases)
    worlds = bj.recorded_worlds(0, ids)
    rag_cases = jax.tree_util.tree_map(lambda x: x[:6], bj.demos.rag_cases(40))
    mc = bj.mc_shapley(
        rag, rag_cases, bj.recorded_worlds(0, range(6)), 0, max_evaluations=400, history=True
    )
    return {
        "exact": bj.exact_blame(refund, failure, worlds),
        "mc_history": mc,
        "mc": dataclasses.replace(mc, history=None),  # what `history=False` returns
        "batch_one_failure": one_failure,
        "batch_no_failures": bj.blame_batch(refund, _all_passing_cases(), 0),
        "contrastive": bj.contrastive(refund, failure, worlds, num_rollouts=16),
    }


def _assert_same(a, b, where="result"):
    assert type(a) is type(b), where
    for field in dataclasses.fields(a):
        x, y, at = getattr(a, field.name), getattr(b, field.name), f"{where}.{field.name}"
        if isinstance(x, (np.ndarray, jax.Array)):
            assert type(x) is type(y), at  # a JAX array comes back as one, NumPy as NumPy
            x, y = np.asarray(x), np.asarray(y)
            assert x.dtype == y.dtype and x.shape == y.shape, at
            assert np.array_equal(x, y, equal_nan=True), at
            if x.dtype.kind == "f":  # -0.0 stays -0.0
                real = ~np.isnan(x)
                assert np.array_equal(np.signbit(x[real]), np.signbit(y[real])), at
        elif dataclasses.is_dataclass(x):
            _assert_same(x, y, at)
        else:
            assert x == y and type(x) is type(y), at


def _round_trip(result, path):
    result.to_json(path)
    text = path.read_text()
    data = _strict_loads(text)  # strict JSON: no bare NaN / Infinity token
    assert data["type"] == type(result).__name__
    back = type(result).load_json(path)
    _assert_same(result, back)
    _assert_same(result, type(result).from_dict(result.to_dict()))
    return text, data


@pytest.mark.parametrize(
    "name",
    ["exact", "mc_history", "mc", "batch_one_failure", "batch_no_failures", "contrastive"],
)
def test_round_trip_is_exact(results, name, tmp_path):
    result = results[name]
    _round_trip(result, tmp_path / f"{name}.json")
    assert os.listdir(tmp_path) == [f"{name}.json"]  # no temporary file left behind


def test_nan_and_inf_are_encoded(results, tmp_path):
    """One analysed failure: the interval of the mean is infinite. MC history: NaN once a
    failure has stopped."""
    batch = results["batch_one_failure"]
    assert batch.num_analysed == 1 and np.isinf(batch.upper).all() and np.isinf(batch.lower).all()
    text, data = _round_trip(batch, tmp_path / "batch.json")
    assert "Infinity" not in text and "NaN" not in text
    assert data["upper"] == ["inf"] * len(batch.steps) and data["lower"] == ["-inf"] * len(
        batch.steps
    )
    assert data["arrays"]["upper"] == {
        "dtype": "float64",
        "shape": [len(batch.steps)],
        "jax": False,
    }

    history = results["mc_history"].history
    assert isinstance(history, MCHistory)
    nan = np.isnan(history.values)
    assert nan.any() and not nan.all()
    text, data = _round_trip(results["mc_history"], tmp_path / "mc.json")
    values = np.array(data["history"]["values"], dtype=object)
    assert np.array_equal(values == None, nan)  # noqa: E711 (elementwise)


def test_zero_failures_keep_their_shapes(results, tmp_path):
    batch = results["batch_no_failures"]
    assert batch.num_failures == 0 and batch.shapley.shape == (0, len(batch.steps))
    _, data = _round_trip(batch, tmp_path / "empty.json")
    assert data["shapley"] == [] and data["arrays"]["shapley"]["shape"] == [0, 4]
    assert "No failures" in bj.BatchResult.load_json(tmp_path / "empty.json").table()


def test_to_dict_is_strict_json_ready(results):
    for name, result in results.items():
        json.dumps(result.to_dict(), allow_nan=False)  # raises on a stray NaN
        assert bj.report.result_to_dict(result) == result.to_dict(), name
    assert (
        bj.report.batch_to_dict(results["batch_one_failure"])
        == results["batch_one_failure"].to_dict()
    )


def test_from_dict_checks_the_type(results):
    data = results["batch_one_failure"].to_dict()
    with pytest.raises(
        ValueError, match="expected a dict of type 'ExactResult', got 'BatchResult'"
    ):
        bj.ExactResult.from_dict(data)
    with pytest.raises(ValueError, match=r"BatchResult has no fields \['colour'\]"):
        bj.BatchResult.from_dict(dict(data, colour="red"))
    with pytest.raises(ValueError, match="lacks the field 'shapley'"):
        bj.BatchResult.from_dict({k: v for k, v in data.items() if k != "shapley"})
    with pytest.raises(ValueError, match="unknown ContrastiveResult format 2"):
        ContrastiveResult.from_dict(dict(results["contrastive"].to_dict(), format=2))


def test_reader_refuses_bare_nan(tmp_path):
    path = tmp_path / "old.json"
    path.write_text('{"type": "BatchResult", "lower": [NaN, -Infinity]}')
    with pytest.raises(ValueError, match="not strict JSON: the bare token NaN"):
        bj.BatchResult.load_json(path)


def test_write_json_of_a_plain_tree(tmp_path):
    path = tmp_path / "summary.json"
    tree = {"a": np.float32(np.nan), "b": [np.inf, -np.inf, 1.5], "c": np.arange(3), "d": (1, None)}
    bj.report.write_json(path, tree)
    assert _strict_loads(path.read_text()) == {
        "a": None,
        "b": ["inf", "-inf", 1.5],
        "c": [0, 1, 2],
        "d": [1, None],
    }


def test_failed_export_leaves_the_old_file(results, tmp_path, monkeypatch):
    """The encoder fails after it has started writing: the old file is untouched."""
    path = tmp_path / "r.json"
    results["exact"].to_json(path)
    before = path.read_bytes()
    real = json.JSONEncoder.iterencode

    def failing(self, o, _one_shot=False):
        for i, chunk in enumerate(real(self, o, _one_shot)):
            if i == 50:
                raise RuntimeError("encoder failed half way")
            yield chunk

    monkeypatch.setattr(json.JSONEncoder, "iterencode", failing)
    for result in (results["batch_one_failure"], results["mc_history"], results["contrastive"]):
        with pytest.raises(RuntimeError, match="half way"):
            result.to_json(path)
        assert path.read_bytes() == before and os.listdir(tmp_path) == ["r.json"]
    with pytest.raises(RuntimeError, match="half way"):
        results["batch_one_failure"].to_json(tmp_path / "new.json")
    assert os.listdir(tmp_path) == ["r.json"]  # a failed new file is not created at all


def test_html_save_is_atomic(results, tmp_path, monkeypatch):
    batch = results["batch_one_failure"]
    page = tmp_path / "report.html"
    page.write_text("old report")
    os.chmod(page, 0o640)

    def fail(*args):
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", fail)
        with pytest.raises(OSError, match="disk full"):
            batch.save_html(page)
    assert page.read_text() == "old report" and os.listdir(tmp_path) == ["report.html"]
    batch.save_html(page)
    assert page.read_text(encoding="utf-8") == batch.to_html()
    assert os.stat(page).st_mode & 0o777 == 0o640  # an existing file keeps its permissions
    assert os.listdir(tmp_path) == ["report.html"]


def test_write_atomic_cleans_up_a_failing_writer(tmp_path):
    path = tmp_path / "out.txt"

    def chunks():
        yield "first half"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        bj.report.write_atomic(path, chunks())
    assert os.listdir(tmp_path) == []
    bj.report.write_atomic(path, "done")
    assert path.read_text() == "done"
