"""The app's quick eval is ``workbench eval``'s use case: when every rollout fails it ends in the same
"every rollout ... failed" error the CLI exits with, not in a summary of zeros."""

from __future__ import annotations

from collections.abc import Callable

from workbench_app.main import WorkbenchApp

from tests.app.conftest import SIZE, wait_until
from tests.app.test_env_controllers import _adder, _screen, _titled
from tests.helpers import MockServer


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
