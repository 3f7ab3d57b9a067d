"""Traffic: what `workbench gateway` recorded of a product's own calls, newest first, read again every few
seconds while the screen is shown (a live tail); the routes the gateway serves, with their splits and shadows;
the highlighted exchange's answer and the feedback the product gave it. ``/`` filters by app, route, arm,
session or text; ``t`` turns the highlighted exchange's app's traffic into a new environment
(``workbench tasks from-traffic``), in the folder new environments go to."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Header, Input, Static
from workbench_app.format import for_app, fpath, visible
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.tables import RowTable
from workbench_app.workers import notify_ui, post_ui

TRAFFIC_POLL_S = 2.0  # how often the store is read again while the screen is shown
SHOWN = 300
COLUMNS = ("time", "app", "route", "arm", "feedback", "answer")


def row_cells(r: dict[str, Any]) -> tuple[Any, ...]:
    arm = Text(visible(str(r["arm"])))
    if r.get("shadow_of"):
        arm.append(" (shadow)", style="dim")
    feedback = "-" if r["feedback"] is None else f"{r['feedback']:g}"
    answer = visible(str(r["completion"] or "")).replace("\n", " ")
    return (time.strftime("%H:%M:%S", time.localtime(r["created_at"])), visible(r["app"]), visible(str(r["route"])),
            arm, feedback, answer[:80])


def routes_text(found: Any) -> Text:
    """The published routes (``live_routes.load``), or why there are none."""
    if isinstance(found, str):
        return Text(found, style="dim")
    t = Text()
    for name, route in found.items():
        t.append(visible(name), style="bold")
        t.append("  " + ", ".join(f"{visible(a.model)} {a.weight:.0%}" for a in route.arms))
        if route.shadow:
            t.append(f"  shadow {visible(route.shadow)}", style="dim")
        t.append("\n")
    return t


class TrafficScreen(WorkbenchAppMixin, Screen[None]):
    TITLE = "Traffic"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter", id="traffic.filter"),
        Binding("t", "to_tasks", "Tasks from this app", id="traffic.tasks"),
        Binding("r", "refresh", "Refresh", id="traffic.refresh"),
    ]
    DEFAULT_CSS = """
    #traffic-routes { height: auto; max-height: 6; padding: 0 1; border: round $primary-darken-1; }
    #traffic-filter { height: 3; }
    #traffic-body { height: 1fr; }
    #traffic-table { width: 3fr; }
    #traffic-detail-box { width: 2fr; border-left: solid $primary-darken-1; padding: 0 1; }
    """

    class TrafficRead(Message):
        def __init__(self, rows: list[dict[str, Any]], routes: Any, text: str) -> None:
            super().__init__()
            self.rows, self.routes, self.text = rows, routes, text

    class DetailRead(Message):
        def __init__(self, rid: str, detail: Text) -> None:
            super().__init__()
            self.rid, self.detail = rid, detail

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.text = ""
        self.detail = ""  # the highlighted exchange's detail, as shown
        self._timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="traffic-routes")
        yield Input(placeholder="filter: app, route, arm, session or answer text (enter)", id="traffic-filter")
        with Horizontal(id="traffic-body"):
            yield RowTable(id="traffic-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="traffic-detail-box"):
                yield Static("no exchange selected", id="traffic-detail")
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        table = self.query_one("#traffic-table", DataTable)
        for col in COLUMNS:
            table.add_column(col, key=col)
        self.action_refresh()
        self.query_one("#traffic-table").focus()
        self._timer = self.set_interval(TRAFFIC_POLL_S, self.action_refresh)

    def on_screen_resume(self) -> None:
        self.action_refresh()
        if self._timer is None:
            self._timer = self.set_interval(TRAFFIC_POLL_S, self.action_refresh)

    def on_screen_suspend(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def action_refresh(self) -> None:
        self._load(self.text)

    def action_filter(self) -> None:
        self.query_one("#traffic-filter", Input).focus()

    @on(Input.Submitted, "#traffic-filter")
    def _filter(self, event: Input.Submitted) -> None:
        self.text = event.value.strip()
        self.action_refresh()
        self.query_one("#traffic-table").focus()

    @work(thread=True, exit_on_error=False, exclusive=True, group="traffic-list")
    def _load(self, text: str) -> None:
        from workbench.errors import WorkbenchError
        from workbench.gateway.live_routes import load
        from workbench.store.traffic import recent_traffic

        try:
            rows = recent_traffic(self.workbench_app.store.get().conn, limit=SHOWN, text=text or None)
        except Exception as e:
            notify_ui(self, f"reading traffic failed: {e}", severity="error")
            return
        try:
            routes: Any = load()
        except WorkbenchError:
            routes = "no gateway has published its routes here: `workbench gateway --route NAME=MODEL` serves"
        post_ui(self, self.TrafficRead(rows, routes, text))

    @on(TrafficRead)
    def _show(self, event: TrafficRead) -> None:
        if event.text != self.text:
            return
        self.query_one("#traffic-routes", Static).update(routes_text(event.routes))
        table = self.query_one("#traffic-table", RowTable)
        selected = table.selected_key()
        if [r["id"] for r in event.rows] == [r["id"] for r in self.rows]:
            return  # nothing new: the cursor and the scroll stay where they are
        self.rows = event.rows
        table.clear()
        for r in event.rows:
            table.add_row(*row_cells(r), key=r["id"])
        if selected is not None and selected in {r["id"] for r in event.rows}:
            table.move_cursor(row=table.get_row_index(selected))
        if not event.rows:
            self.query_one("#traffic-detail", Static).update(
                f"no traffic matches {self.text!r}" if self.text else
                "no traffic recorded yet: point a product's SDK at `workbench gateway` (docs/gateway.md)")

    @on(DataTable.RowHighlighted, "#traffic-table")
    def _on_highlight(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value is not None:
            self._load_detail(str(event.row_key.value))

    @work(thread=True, exit_on_error=False, exclusive=True, group="traffic-detail")
    def _load_detail(self, rid: str) -> None:
        from workbench.store.rollout_detail import get_rollout

        try:
            r = get_rollout(self.workbench_app.store.get().conn, rid)
        except Exception as e:
            notify_ui(self, f"reading {rid} failed: {e}", severity="error")
            return
        t = Text()
        state = r.get("state") or {}
        t.append(f"{rid}\n", style="bold")
        t.append(f"app {visible(str(state.get('app')))}  route {visible(str(state.get('route')))}  arm "
                 f"{visible(str(state.get('arm')))}  session {visible(str(state.get('session')))}\n", style="dim")
        asked = [m for m in r.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
        if asked:
            t.append("asked: ", style="bold")
            t.append(visible(str(asked[-1].get("content") or "")) + "\n")
        t.append("answer: ", style="bold")
        t.append(visible(str(r.get("completion") or "")) + "\n")
        for f in r.get("feedback") or []:
            whom = "this answer" if f["response_id"] else "its session"
            t.append(f"feedback on {whom}: ", style="bold")
            t.append(" ".join(x for x in ("" if f["score"] is None else f"{f['score']:g}", visible(f["label"]),
                                          visible(f["comment"])) if x) + "\n")
        post_ui(self, self.DetailRead(rid, t))

    @on(DetailRead)
    def _show_detail(self, event: DetailRead) -> None:
        self.detail = event.detail.plain
        self.query_one("#traffic-detail", Static).update(event.detail)

    def action_to_tasks(self) -> None:
        rid = self.query_one("#traffic-table", RowTable).selected_key()
        row = next((r for r in self.rows if r["id"] == rid), None)
        if row is None:
            self.notify("no exchange selected: the highlighted one's app is the traffic made into tasks",
                        severity="warning")
            return
        self._to_tasks(row["app"])

    @work(thread=True, exit_on_error=False, exclusive=True, group="traffic-tasks")
    def _to_tasks(self, app: str) -> None:
        from workbench.authoring.templates import default_dir
        from workbench.errors import WorkbenchError
        from workbench.gateway.from_traffic import from_traffic

        name = "traffic_" + "".join(c if c.isalnum() else "_" for c in app) + time.strftime("_%Y%m%d_%H%M%S")
        try:
            made = from_traffic(self.workbench_app.store.get().conn, default_dir() / name, app=app)
        except WorkbenchError as e:
            notify_ui(self, for_app(e), severity="error")
            return
        notify_ui(self, f"wrote {fpath(made.path)}: {made.tasks} tasks ({made.held_out} held out) from "
                        f"{made.sessions} sessions of {app}; press 1 to find it")


__all__ = ["TrafficScreen"]
