"""``workbench compare --traffic ROUTE --env ENV``: an environment's rubric re-scored over the answers a route's
arms gave, unpaired between split arms and paired for a shadow. The arms are real mock upstreams behind a real
gateway (one repeats the question, one answers "no idea"), the traffic comes from the openai SDK."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.support import Running
from tests.helpers import assert_user_error, last_json, mock_args, write_file

#: Tickets the environment knows: its reward is whether the reply names the ticket (the task's answer).
TICKETS_ENV = '''
    import workbench as wb

    def load_environment(tickets: int = 30):
        rubric = wb.Rubric()

        @rubric.reward
        def names_the_ticket(completion: str, answer: str) -> float:
            return float(answer in completion)

        rows = [{"prompt": f"ticket {i}", "answer": f"ticket {i}"} for i in range(tickets)]
        return wb.Environment(name="tickets", tasks=wb.TaskSet.from_records(rows), harness=wb.SingleTurn(),
                              rubric=rubric)
'''

#: A rubric that reads no answer: every recorded exchange is scored, whatever task it matches.
LENGTH_ENV = '''
    import workbench as wb

    def load_environment():
        rubric = wb.Rubric()

        @rubric.reward
        def long_enough(completion: str) -> float:
            return float(len(completion) >= 8)

        return wb.Environment(name="lengths", tasks=wb.TaskSet.from_records([{"prompt": "x"}]),
                              harness=wb.SingleTurn(), rubric=rubric)
'''

#: A reward that needs the rollout's sandbox, which recorded traffic never had.
SANDBOX_ENV = '''
    import workbench as wb

    def load_environment():
        rubric = wb.Rubric()

        @rubric.reward
        async def ran(completion: str, sandbox) -> float:
            return 1.0

        return wb.Environment(name="boxed", tasks=wb.TaskSet.from_records([{"prompt": "x"}]),
                              harness=wb.SingleTurn(), rubric=rubric,
                              runtime=wb.Local())
'''


@pytest.fixture
def upstream_modes() -> dict[str, list[str]]:
    """``good`` repeats the ticket; ``cand`` never knows."""
    return {"good": mock_args("echo"), "cand": mock_args("script", script=["no idea"])}


def _traffic(registered: str, gw: Running) -> dict[str, int]:
    """30 known tickets and 4 unknown questions to the split route, 10 tickets to the shadowed one; the calls
    each arm of the split route served."""
    import openai

    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0)
    served = {"good": 0, "cand": 0}
    for text in [*(f"ticket {i}" for i in range(30)), *(f"unknown {j}" for j in range(4))]:
        raw = oa.chat.completions.with_raw_response.create(model="support",
                                                           messages=[{"role": "user", "content": text}])
        served[raw.headers["X-Workbench-Arm"]] += 1
    for i in range(10):
        oa.chat.completions.create(model="help", messages=[{"role": "user", "content": f"ticket {i}"}])
    return served


def test_an_envs_rubric_scores_each_arms_recorded_answers_and_pairs_a_shadow_with_what_it_shadowed(
        registered: str, gateway: Callable[..., Running], cli: Callable[..., Any], env: dict[str, str],
        tmp_path: Path) -> None:
    tickets = write_file(tmp_path / "tickets" / "__init__.py", TICKETS_ENV).parent
    lengths = write_file(tmp_path / "lengths" / "__init__.py", LENGTH_ENV).parent
    gw = gateway("--route", "support=good:0.5,cand:0.5", "--route", "help=good", "--shadow", "help=cand")
    served = _traffic(registered, gw)
    gw.stop()

    res = cli("compare", "--traffic", "support", "--env", tickets, "--baseline", "good", "--json", env=env)
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    good, cand = out["arms"]
    assert (good["exchanges"], cand["exchanges"]) == (served["good"], served["cand"])
    rubric = out["rubric"]
    assert rubric["env"] == "tickets" and rubric["scored"] == rubric["matched"] == 30
    assert sum(rubric["skipped"].values()) == 4 and "reads the task's answer" in next(iter(rubric["skipped"]))
    assert good["rubric"]["mean"] == 1.0 and cand["rubric"]["mean"] == 0.0
    assert good["rubric"]["scored"] + cand["rubric"]["scored"] == 30
    assert cand["rubric"]["delta"] == -1.0 and cand["rubric"]["significant"] is True
    assert cand["rubric"]["ci_method"] == "unpaired bootstrap"
    assert good["mean_feedback"] is None  # nobody rated: the feedback side says so, the rubric side stands

    shadowed = last_json(cli("compare", "--traffic", "help", "--env", tickets, "--json", env=env).stdout)
    [arm] = shadowed["arms"]
    [shadow] = shadowed["shadows"]
    assert arm["arm"] == "good" and arm["rubric"]["mean"] == 1.0
    assert shadow["arm"] == "cand" and shadow["exchanges"] == 10
    assert shadow["rubric"]["pairs"] == 10 and shadow["rubric"]["delta"] == -1.0
    assert shadow["rubric"]["ci_method"] == "paired bootstrap" and shadow["rubric"]["ci95"] == [-1.0, -1.0]
    assert shadow["rubric"]["significant"] is True

    fewer = last_json(cli("compare", "--traffic", "support", "--env", tickets, "-a", '{"tickets": 10}', "--json",
                          env=env).stdout)
    assert fewer["rubric"]["scored"] == 10 and sum(fewer["rubric"]["skipped"].values()) == 24
    every = last_json(cli("compare", "--traffic", "support", "--env", lengths, "--json", env=env).stdout)
    assert every["rubric"]["scored"] == 34 and every["rubric"]["matched"] == 0 and not every["rubric"]["skipped"]

    table = cli("compare", "--traffic", "help", "--env", tickets, env=env)
    assert table.rc == 0, table.stderr
    assert "rubric" in table.stdout and "paired bootstrap" in table.stdout and "over 10 pairs" in table.stdout


#: (arguments after ``compare``, what the one line says); ``{boxed}`` is an environment that needs a sandbox.
BAD_COMPARE = [
    (("run-1", "--env", "{boxed}"), "--env and --env-args go with --traffic ROUTE"),
    (("--traffic", "support", "-a", "{{}}"), "--env-args goes with --env ENV"),
    (("--traffic", "support", "--env", "{boxed}"), "cannot score recorded traffic: reward 'ran' needs the rollout's live sandbox"),
    (("--traffic", "support", "--env", "{boxed}", "--baseline", "nobody"), "--baseline nobody: the route's arms are"),
    (("--traffic", "elsewhere", "--env", "{boxed}"), "no traffic of the route 'elsewhere'"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD_COMPARE, ids=[" ".join(a) for a, _ in BAD_COMPARE])
def test_a_traffic_comparison_on_an_env_refuses_in_one_line(
        registered: str, gateway: Callable[..., Running], cli: Callable[..., Any], env: dict[str, str],
        tmp_path: Path, args: tuple[str, ...], fragment: str) -> None:
    import openai

    boxed = write_file(tmp_path / "boxed" / "__init__.py", SANDBOX_ENV).parent
    gw = gateway("--route", "support=good")
    openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0).chat.completions.create(
        model="support", messages=[{"role": "user", "content": "ticket 1"}])
    gw.stop()
    assert_user_error(cli("compare", *(a.format(boxed=boxed) for a in args), env=env), fragment)
