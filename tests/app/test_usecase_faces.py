"""The app calls the use cases the CLI calls: its environment rows are ``workbench envs``'s descriptions,
and its quick eval is ``workbench eval``'s use case (when every rollout fails it ends in the same
"every rollout ... failed" error the CLI exits with, not in a summary of zeros)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workbench_app.main import WorkbenchApp

from tests.app.conftest import SIZE, wait_until
from tests.app.test_env_controllers import _adder, _screen, _titled
from tests.helpers import ADDER_ENV, MockServer, write_file
from workbench.authoring.discovery import EnvRef

BROKEN_ENV = "def load_environment():\n    raise RuntimeError('no data here')\n"


def test_the_apps_environment_rows_are_the_listing_use_case(tmp_path: Path) -> None:
    from workbench_app.env_state import load_env

    from workbench.usecases.environments import describe

    for name, source in (("adder", ADDER_ENV), ("broken", BROKEN_ENV)):
        ref = EnvRef(name, "path", write_file(tmp_path / f"{name}.py", source))
        listing, row = describe(ref), load_env(ref, reload=False)
        assert row.version == listing.version and row.files == listing.files
        assert row.status == ("ok" if listing.loaded else "error") and row.framework == listing.framework
        if listing.loaded:
            assert row.message == listing.description and row.tasks == describe(ref, count_tasks=True).tasks
        else:
            assert listing.error and "no data here" in listing.error and "no data here" in row.message


async def test_a_quick_eval_whose_every_rollout_fails_says_so(make_app: Callable[..., WorkbenchApp],
                                                              mock_server: Callable[..., MockServer]) -> None:
    server = mock_server("script", script=[{"raw": "not json"}])
    app = make_app(base_url=server.base_url, model="mock-model", quick_eval_n=2)
    async with app.run_test(size=SIZE) as pilot:
        st = await _adder(pilot, app)
        _screen(app).quick_eval.start(st)
        failed = await wait_until(pilot, lambda: _titled(app, "quick eval failed"), timeout=60, what="the eval to end")
        assert _titled(app, "quick eval done") == []
        assert "every rollout of run" in failed[0] and "model.bad_response" in failed[0], failed
        assert "the Traces screen has the details" in failed[0]
