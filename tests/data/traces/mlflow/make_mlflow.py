"""Writes the MLflow trace files beside this script: the planner -> researcher -> writer
pipeline of tests/test_traces_frameworks.py traced by MLflow 3.17.2 (`@mlflow.trace` with
span type AGENT for each agent, `mlflow.openai.autolog()` for the calls, a SQLite tracking
store), read back with `mlflow.get_trace(trace_id).to_json()`:

- `mlflow-3.17.2.jsonl`: two traces, one per line: a run whose planner chose wrongly, and a
  run whose writer's call raised (HTTP 500) after the planner and the researcher chose
  rightly;
- `mlflow-3.17.2-one.json`: the first trace alone, one document in a file.

The model is the loopback server of tests/scorer_server.py. The full `mlflow` package (the
tracing-only `mlflow-tracing` records no-op spans without a tracking store) took 162 s and
858 MB (91 packages) to install here, too heavy for the test environment, so the files are
committed. They were made in a virtual environment of its own with mlflow 3.17.2 and
openai 3.63.0:

    python tests/data/traces/mlflow/make_mlflow.py
"""

import json
import os
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parents[2]))  # tests/, for scorer_server
os.environ["MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"] = "false"

import mlflow  # noqa: E402
import openai  # noqa: E402
from scorer_server import FakeAPI, Reply, chat  # noqa: E402

QUESTION = "When did the museum reopen?"
AGENTS = {
    "planner": ("search", "answer"),
    "researcher": ("web", "archive"),
    "writer": ("cite", "guess"),
}


def system(agent):
    return f"You are the {agent}. Answer with one word: {' or '.join(AGENTS[agent])}."


def main():
    replies = {"planner": "answer", "researcher": "web", "writer": "cite"}
    failing = set()

    def model(body):
        text = body["messages"][0]["content"]
        agent = next(a for a in AGENTS if system(a) == text)
        if agent in failing:
            return Reply({"error": {"message": "the model is down"}}, status=500)
        return Reply(chat(replies[agent]))

    api = FakeAPI(model)
    client = openai.OpenAI(base_url=f"{api.url}/v1", api_key="test", timeout=5.0, max_retries=0)
    folder = tempfile.mkdtemp()
    os.chdir(folder)
    mlflow.set_tracking_uri(f"sqlite:///{folder}/mlflow.db")
    mlflow.set_experiment("blame")
    mlflow.openai.autolog()

    def agent_step(agent):
        @mlflow.trace(name=agent, span_type="AGENT")
        def run(question):
            response = client.chat.completions.create(
                model="test-model",
                messages=[
                    {"role": "system", "content": system(agent)},
                    {"role": "user", "content": question},
                ],
                max_tokens=1,
            )
            return response.choices[0].message.content

        return run

    @mlflow.trace(name="pipeline", span_type="CHAIN")
    def pipeline(question):
        return [agent_step(agent)(question) for agent in AGENTS]

    lines = []
    try:
        pipeline(QUESTION)  # the planner answers instead of searching
        lines.append(mlflow.get_trace(mlflow.get_last_active_trace_id()).to_json())
        replies["planner"] = "search"
        failing.add("writer")
        try:
            pipeline(QUESTION)
        except openai.InternalServerError:
            pass
        lines.append(mlflow.get_trace(mlflow.get_last_active_trace_id()).to_json())
    finally:
        api.close()
    (HERE / "mlflow-3.17.2.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    first = json.dumps(json.loads(lines[0]), indent=1)
    (HERE / "mlflow-3.17.2-one.json").write_text(first + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} traces to {HERE}")


if __name__ == "__main__":
    main()
