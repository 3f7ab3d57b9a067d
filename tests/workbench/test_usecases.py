"""Each use case is one function that every face calls: the command line (``--json``), ``workbench mcp``
(through the MCP SDK's own client), the app and the Python API (``import workbench as wb``) answer alike."""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers import ADDER_ENV, REPO, CliResult, MockServer, assert_user_error, last_json, write_file
from workbench.usecases.evaluation import EvalSummary

CLI_DIR = REPO / "workbench" / "cli"


def _declares_env_args(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value == "--env-args"
                                              for a in node.args)


def test_env_args_is_declared_once_in_common_and_every_command_uses_it() -> None:
    declared = {p.name for p in CLI_DIR.glob("*.py") if any(_declares_env_args(n) for n in ast.walk(ast.parse(
        p.read_text(encoding="utf-8"))))}
    assert declared == {"common.py"}, f"--env-args declared by hand in {sorted(declared - {'common.py'})}: use " \
                                      "common.env_args_option()"
    users = {p.name for p in CLI_DIR.glob("*_cmd.py") if "@env_args_option(" in p.read_text(encoding="utf-8")}
    assert {"eval_cmd.py", "probe_cmd.py", "rescore_cmd.py", "train_cmd.py", "import_cmd.py"} <= users


def test_run_async_has_one_home() -> None:
    defined = [p.name for p in CLI_DIR.glob("*.py") for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
               if isinstance(n, ast.FunctionDef) and n.name == "run_async"]
    assert defined == ["common.py"]
    assert not [p for p in Path(CLI_DIR).glob("*.py") if "eval_cmd import run_async" in p.read_text(encoding="utf-8")]


# -- the faces, side by side --------------------------------------------------------------------------
BROKEN_ENV = "import workbench as wb\n\ndef load_environment():\n    raise RuntimeError('no data here')\n"
#: The keys of an eval summary that differ between two runs of the same eval: its id, timing, and what
#: follows from the mock's wording of a right answer (it varies it: a words metric, completion tokens).
VARIES = {"run_id", "rollouts_per_s", "mean_rollout_s", "retries", "metrics", "completion_tokens", "cost_usd"}


@pytest.fixture
def in_process(cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process sees the same XDG folders and store as the CLI's subprocesses."""
    for key in [k for k in os.environ if k.startswith(("WORKBENCH_", "OPENAI_"))]:
        monkeypatch.delenv(key)
    for key, value in cli_env.items():
        if key.startswith(("XDG_", "WORKBENCH_")):
            monkeypatch.setenv(key, value)
    return cli_env


async def mcp_call(session: Any, tool: str, **args: Any) -> tuple[bool, Any]:
    """(isError, the structured result or the error line)."""
    res = await session.call_tool(tool, args)
    return res.is_error, (res.content[0].text if res.is_error else res.structured_content)


async def test_listing_environments_is_one_answer_from_the_cli_mcp_and_the_use_case(
        in_process: dict[str, str], cli: Callable[..., CliResult], tmp_path: Path) -> None:
    from tests.workbench.test_mcp_server import serve
    from workbench.usecases.environments import list_environments

    user_envs = Path(in_process["XDG_DATA_HOME"]) / "workbench" / "envs"
    write_file(user_envs / "adder.py", ADDER_ENV)
    write_file(user_envs / "broken.py", BROKEN_ENV)
    res = cli("envs", "--json")
    assert res.rc == 0, res.stderr
    from_cli = {row["name"]: row for row in last_json(res.stdout)["envs"]}
    async with serve(in_process, tmp_path) as session:
        error, listed = await mcp_call(session, "list_environments")
    assert not error, listed
    from_mcp = {row["name"]: {k: v for k, v in row.items() if k != "readme"} for row in listed["envs"]}
    from_function = {listing.name: listing.row() for listing in list_environments()}
    assert from_cli == from_mcp == from_function
    assert {"arithmetic", "adder", "broken"} <= set(from_cli)
    assert "RuntimeError: no data here" in from_cli["broken"]["error"]
    assert "error" not in from_cli["adder"] and from_cli["adder"]["origin"] == "user"


async def test_an_eval_is_one_summary_from_the_cli_mcp_wb_eval_and_the_use_case(
        in_process: dict[str, str], cli: Callable[..., CliResult], tmp_path: Path, store_path: Path,
        mock_server: Callable[..., MockServer]) -> None:
    import workbench as wb
    from tests.workbench.test_mcp_server import serve
    from workbench.runs.evaluate import EvalOptions
    from workbench.store import Store
    from workbench.usecases.evaluation import run_eval

    # Always right, one rollout a task (the group reward `concise` of a group of one): the same rewards each time.
    url, n, r = mock_server("arithmetic", accuracy=1.0).base_url, 4, 1
    res = cli("eval", "arithmetic", "--base-url", url, "-m", "mock-model", "-n", n, "-r", r, "--json")
    assert res.rc == 0, res.stderr
    from_cli = last_json(res.stdout)
    async with serve(in_process, tmp_path) as session:
        error, from_mcp = await mcp_call(session, "run_eval", env="arithmetic", base_url=url, model="mock-model",
                                         n=n, r=r)
    assert not error, from_mcp
    from_api = await asyncio.to_thread(wb.eval, "arithmetic", base_url=url, model="mock-model", n=n, rollouts=r)
    with Store(store_path) as store:
        result = await run_eval(EvalOptions(env="arithmetic", n=n, rollouts_per_task=r, base_url=url,
                                            model="mock-model"), store)
    from_function = orjson.loads(orjson.dumps(result.summary))
    summaries = [from_cli, from_mcp, orjson.loads(orjson.dumps(from_api)), from_function]
    assert len({s["run_id"] for s in summaries}) == 4, "each face stores a run of its own"
    assert {frozenset(s) for s in summaries} == {frozenset(from_cli)}, "the same keys from every face"
    same = [{k: v for k, v in s.items() if k not in VARIES} for s in summaries]
    assert same[0] == same[1] == same[2] == same[3]
    assert same[0]["rollouts"] == n * r and same[0]["errors"] == 0 and same[0]["rewards"]["correct"] == 1.0
    assert set(from_api) <= set(EvalSummary.__annotations__), "EvalSummary documents every key"


async def test_every_rollout_failed_is_the_same_error_from_the_cli_mcp_and_wb_eval(
        in_process: dict[str, str], cli: Callable[..., CliResult], tmp_path: Path,
        mock_server: Callable[..., MockServer]) -> None:
    import workbench as wb
    from tests.workbench.test_mcp_server import serve
    from workbench.usecases.evaluation import EveryRolloutFailed

    url = mock_server("script", script=[{"raw": "not json"}]).base_url
    res = cli("eval", "arithmetic", "--base-url", url, "-m", "mock-model", "-n", 2, "--json")
    line = assert_user_error(res, "every rollout of run", "failed (model.bad_response", "`workbench show")
    async with serve(in_process, tmp_path) as session:
        error, message = await mcp_call(session, "run_eval", env="arithmetic", base_url=url, model="mock-model", n=2)
    assert error and "every rollout of run" in message and "failed (model.bad_response" in message, message
    assert "show_rollout of" in message
    with pytest.raises(EveryRolloutFailed, match=r"every rollout of run \S+ failed \(model.bad_response") as caught:
        await asyncio.to_thread(wb.eval, "arithmetic", base_url=url, model="mock-model", n=2)
    assert isinstance(caught.value, wb.WorkbenchError)
    assert caught.value.summary["rollouts"] == caught.value.summary["failed"] == 2
    # The reason is the same sentence in each; only where the details are differs by face.
    why = lambda text: text.split("failed (", 1)[1].split(");", 1)[0]  # noqa: E731
    assert why(line) == why(message) == why(str(caught.value))


def test_a_comparison_is_one_answer_from_the_cli_wb_compare_and_the_use_case(
        in_process: dict[str, str], cli: Callable[..., CliResult], store_path: Path,
        mock_server: Callable[..., MockServer]) -> None:
    import workbench as wb
    from workbench.store import Store
    from workbench.usecases.comparison import Comparison, ModelComparison, compare

    echo = mock_server("echo").base_url
    right = mock_server("arithmetic", accuracy=1.0).base_url
    good = wb.eval("arithmetic", base_url=right, model="mock-model", n=4, rollouts=2)
    poor = wb.eval("arithmetic", base_url=echo, model="mock-model", n=4, rollouts=2)
    runs = [good["run_id"], poor["run_id"]]
    res = cli("compare", *runs, "--json")
    assert res.rc == 0, res.stderr
    from_cli = last_json(res.stdout)
    from_api = wb.compare(runs)
    with Store(store_path, readonly=True) as store:
        from_function = compare(store.conn, runs)
    assert from_cli == orjson.loads(orjson.dumps(from_api)) == orjson.loads(orjson.dumps(from_function))
    assert from_api["baseline"] == good["run_id"] and [m["run_id"] for m in from_api["models"]] == runs
    assert from_api["models"][1]["delta"] < 0 and from_api["models"][1]["regressions"]
    assert set(from_api) == set(Comparison.__annotations__)
    assert all(set(m) <= set(ModelComparison.__annotations__) for m in from_api["models"])
    # A store that is not there is refused by name, never created.
    with pytest.raises(wb.WorkbenchError, match="no store at"):
        wb.compare(runs, db=store_path.with_name("elsewhere.db"))
    assert not store_path.with_name("elsewhere.db").exists()


def test_import_workbench_stays_light() -> None:
    code = ("import sys, workbench as wb; assert callable(wb.eval) and callable(wb.compare); "
            "heavy = [m for m in ('workbench.runs.evaluate', 'workbench.store', 'workbench.analysis.compare', "
            "'aiohttp', 'sqlite3') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


async def test_the_launch_preflight_is_one_verdict_from_the_cli_mcp_and_the_use_case(
        in_process: dict[str, str], cli: Callable[..., CliResult], tmp_path: Path, store_path: Path) -> None:
    from tests.workbench.test_mcp_server import CONFIG_28, serve
    from workbench.store import Store
    from workbench.usecases.launch import preflight

    plan_args = ("launch", "arithmetic", "--config", CONFIG_28, "--plan", "--max-steps", 50)
    res = cli(*plan_args, "--json")
    assert res.rc == 0, res.stderr
    from_cli = last_json(res.stdout)
    over = cli(*plan_args, "--budget", 10)
    refused = assert_user_error(over, "exceeds the budget")
    async with serve(in_process, tmp_path) as session:
        _, planned = await mcp_call(session, "plan_launch", env="arithmetic", config=str(CONFIG_28), max_steps=50)
        _, tight = await mcp_call(session, "plan_launch", env="arithmetic", config=str(CONFIG_28), max_steps=50,
                                  budget=10)
    with Store(store_path) as store:
        checked = preflight(store.conn, None, env="arithmetic", config_file=str(CONFIG_28), max_steps=50)
        tight_check = preflight(store.conn, None, env="arithmetic", config_file=str(CONFIG_28), max_steps=50,
                                budget_usd=10)
    # plan_launch answers the plan with its own verdict beside it ("within_budget" judges the month too).
    verdict = ("launched", "within_budget", "budget_problem")
    from_function, from_mcp, from_cli = ({k: v for k, v in plan.items() if k not in verdict} for plan in (
        orjson.loads(orjson.dumps(checked.plan.to_dict())), planned, from_cli))
    assert from_cli == from_mcp == from_function and from_cli["nodes"] == 28 and from_cli["max_steps"] == 50
    assert checked.refusal is None and planned["within_budget"] is True
    assert tight_check.budget_problem and tight_check.refusal == tight_check.budget_problem
    assert tight["budget_problem"] == tight_check.budget_problem and tight["within_budget"] is False
    flags = {"LaunchPlan.max_steps": "--max-steps", "LaunchPlan.budget": "--budget"}  # the CLI names the fields
    assert tight_check.budget_error is not None and tight_check.budget_error.render(flags.__getitem__) in refused


async def test_a_probe_is_one_verdict_from_the_cli_and_the_function_the_app_calls(
        in_process: dict[str, str], cli: Callable[..., CliResult], store_path: Path) -> None:
    from workbench.runs.probe import probe_env
    from workbench.store import Store

    res = cli("probe", "arithmetic", "-n", 3, "--json")
    assert res.rc in (0, 1), res.stderr  # 1: a policy is exploitable, which is a verdict too
    from_cli = last_json(res.stdout)
    with Store(store_path) as store:
        from_function = orjson.loads(orjson.dumps(await probe_env("arithmetic", store, n=3)))

    def verdict(out: dict[str, Any]) -> dict[str, Any]:
        keep = ("name", "mean_reward", "rewards", "exploitable", "earns_nothing", "skipped", "summary")
        return {"env": out["env"], "env_version": out["env_version"], "tasks": out["tasks"], "basis": out["basis"],
                "exploitable": out["exploitable"], "policies": [{k: p[k] for k in keep} for p in out["policies"]]}

    assert verdict(from_cli) == verdict(from_function) and len(from_cli["policies"]) > 3
