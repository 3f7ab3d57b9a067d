"""Open the Textual app (only imported when ``workbench`` runs with no command)."""

from __future__ import annotations

from workbench.errors import WorkbenchError


def open_tui(db: str | None) -> None:
    try:
        from workbench_app.main import run_app
    except ImportError as e:
        raise WorkbenchError(
            f"the terminal app needs Textual ({e}); install it with `pip install 'rl-workbench[tui]'`") from None
    run_app(db)
