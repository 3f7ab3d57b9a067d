"""The footer's "more" key: at 80×24 the Environments footer has no room for every key; ``m`` shows the
ones it hides (by width, or kept off the first page) and ``m`` again goes back."""

from __future__ import annotations

from collections.abc import Callable

from textual.widgets._footer import FooterKey
from workbench_app.main import WorkbenchApp
from workbench_app.widgets.footer import WorkbenchFooter

from tests.app.conftest import wait_until

SMALL = (80, 24)
HIDDEN_AT_80 = {"play", "launch", "hub", "probe", "rescore"}


def _shown(app: WorkbenchApp) -> dict[str, str]:
    """action -> description of every footer key on screen now."""
    footer = app.screen.query_one(WorkbenchFooter)
    return {k.action: k.description for k in footer.query(FooterKey) if k.display and k.region.width}


async def test_more_shows_the_keys_80_columns_hide(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SMALL) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.envs.get("adder") and screen.envs["adder"].status == "ok",
                         what="adder to load")
        await wait_until(pilot, lambda: "footer_more" in _shown(app), what="the more key")
        first = _shown(app)
        assert not HIDDEN_AT_80 & set(first)  # the first page has no room for them
        assert {"help", "quit", "validate"} <= set(first)

        await pilot.press("m")
        await wait_until(pilot, lambda: set(_shown(app)) >= HIDDEN_AT_80, what="the second page")
        second = _shown(app)
        assert second["footer_more"] == "Back" and {"help", "quit"} <= set(second)
        assert "validate" not in second  # the first page's keys are not repeated
        assert (second["play"], second["probe"], second["rescore"]) == ("Play", "Probe", "Re-score")

        await pilot.press("m")
        await wait_until(pilot, lambda: "validate" in _shown(app), what="the first page again")
        assert not HIDDEN_AT_80 & set(_shown(app))
        await pilot.press("P")  # a key of the second page acts whichever page shows
        await wait_until(pilot, lambda: type(app.screen).__name__ == "ProbeScreen", what="the probe")
