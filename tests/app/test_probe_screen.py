"""The probe in the app: P on an environment runs `workbench probe` in a worker and shows its table; Enter on
an exploitable row opens its example rollout beside the gold rollout of the same task."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.widgets import DataTable
from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.probe import ProbeScreen
from workbench_app.screens.rollout_diff import RolloutDiffScreen

from tests.app.conftest import SIZE, screen_text, wait_until
from tests.helpers import write_file

SUBSTRING_ENV = '''
import workbench as wb


def load_environment() -> wb.Environment:
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)]
    rubric = wb.Rubric()

    @rubric.reward
    def correct(completion: str, answer: str) -> float:
        return float(answer in completion)  # the hole: a list of every number holds the answer

    return wb.Environment(name="substr", tasks=wb.TaskSet.from_records(rows), harness=wb.SingleTurn(), rubric=rubric)
'''


async def test_p_probes_the_environment_and_opens_an_exploit_beside_the_gold(
        make_app: Callable[..., WorkbenchApp], env_dir: Path) -> None:
    write_file(env_dir / "substr.py", SUBSTRING_ENV)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        envs = app.screen
        assert isinstance(envs, EnvironmentsScreen)
        await wait_until(pilot, lambda: "substr" in envs.envs and all(e.status != "loading" for e in envs.envs.values()),
                         what="the environments")
        table = envs.query_one("#env-table", DataTable)
        table.move_cursor(row=table.get_row_index("substr"))
        await pilot.press("P")
        probe = await wait_until(pilot, lambda: isinstance(app.screen, ProbeScreen) and app.screen.result is not None
                                 and app.screen, timeout=60, what="the probe's table")
        found = {p["name"]: (p["exploitable"], p["mean_reward"]) for p in probe.result["policies"]}
        assert probe.result["exploitable"] == 1 and found["every_answer"][0], found
        await wait_until(pilot, lambda: all(s in screen_text(app) for s in ("EXPLOITABLE", "every_answer",
                                                                            "1 exploitable")),
                         what="the probe's table on screen")
        rows = probe.query_one("#probe-table", DataTable)
        assert str(rows.get_cell_at((rows.cursor_row, 0))) == "every_answer", "the cursor starts on the exploit"
        await pilot.press("enter")
        diff = await wait_until(pilot, lambda: isinstance(app.screen, RolloutDiffScreen) and app.screen,
                                what="the rollout diff")
        policy = next(p for p in probe.result["policies"] if p["name"] == "every_answer")
        assert diff.diff.a["id"] == policy["gold_rollout"] and diff.diff.b["id"] == policy["example_rollout"]
        assert diff.diff.a["task_id"] == diff.diff.b["task_id"]
