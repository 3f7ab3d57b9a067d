"""The Environments screen's detail panel: what is known of the selected environment, as text."""

from __future__ import annotations

from rich.text import Text
from workbench_app.env_state import EnvState
from workbench_app.format import fnum, fpath

NONE_FOUND = "no environments found: add one under the user env folder or WORKBENCH_ENV_PATH"


def describe(st: EnvState) -> Text:
    """``st``'s origin, version, load, latest run and validation report."""
    out = Text()
    out.append(f"{st.name}", style="bold")
    out.append(f"  ({st.ref.origin})  version {st.version}")
    dialect = st.dialect or st.ref.format
    out.append(f"  dialect {dialect}\n" if dialect else "\n")
    if st.framework:
        out.append(f"a {st.framework.split()[0]} environment ({st.framework}), run by Workbench's adapter\n",
                   style="cyan")
    out.append(f"{fpath(st.ref.path) if st.ref.path else st.ref.module}\n", style="dim")
    if st.status == "error":
        out.append("load error: ", style="bold red")
        out.append(st.message + "\n", style="red")
    elif st.status == "ok":
        out.append("loaded", style="green")
        out.append(f" — {st.tasks if st.tasks is not None else '?'} tasks")
        out.append(f" — {st.message}\n" if st.message else "\n")
    if st.latest:
        r = st.latest
        out.append(f"latest run {r['id']} ({r.get('status', '')}): mean reward {fnum(r.get('mean_reward'))}"
                   f" over {r.get('rollouts', 0)} rollouts, {r.get('errors', 0)} errors\n")
    if st.report_error:
        out.append("validate: ", style="bold")
        out.append(st.report_error + "\n", style="red")
    elif st.report is not None:
        rep = st.report
        out.append("validate: ", style="bold")
        out.append("ok" if rep.ok else "problems", style="green" if rep.ok else "bold red")
        out.append(f" ({rep.tasks_checked} tasks checked)\n")
        for p in rep.problems:
            out.append(f"  ✗ {p}\n", style="red")
        for w in rep.warnings:
            out.append(f"  ! {w}\n", style="yellow")
        if rep.gold:
            out.append("  gold: " + ", ".join(f"{k}={v:.3f}" for k, v in rep.gold.items()) + "\n")
        if rep.empty:
            out.append("  empty: " + ", ".join(f"{k}={v:.3f}" for k, v in rep.empty.items()) + "\n")
    return out
