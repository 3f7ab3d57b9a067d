"""Traces: every stored rollout, filtered, sorted, searched; o steps through where rollouts came from
(every source, model, imported, human); K steps through the kinds of run shown (the user's own by
default: evaluations, training, imports; then every kind, probes, validations, debugger and Play
sessions); Enter opens one, its search hits highlighted (n / N go from hit to hit); m marks one and
D on another shows the two side by side; x exports the selection.

Opening reads the store in a worker, which posts what it read as :class:`TracesScreen.RolloutLoaded`
or :class:`TracesScreen.DiffLoaded`; the app shows it (``WorkbenchApp`` pushes the detail or diff screen)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.suggester import SuggestFromList
from textual.timer import Timer
from textual.validation import Number
from textual.widgets import Header, Input, Static
from workbench_app.format import fnum, ftime, safe_text
from workbench_app.screens.export import ExportScreen, ExportTarget, default_export_path
from workbench_app.trace_source import (
    SORTS,
    SOURCES,
    Filters,
    RolloutSource,
    export_atif,
    export_jsonl,
    kind_label,
    load_rollout,
    next_kinds,
    suggestions,
)
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.virtual_table import Column, VirtualTable
from workbench_app.workers import notify_ui, post_ui

from workbench.analysis.diff import RolloutDiff, load_diff
from workbench.errors import WorkbenchError
from workbench.store.queries import RolloutSummary

#: (input id, placeholder, Filters field, narrow)
FILTER_INPUTS = [
    ("f-env", "env", "env", False),
    ("f-model", "model", "model", False),
    ("f-run", "run", "run_id", False),
    ("f-error", "error kind", "error_kind", False),
    ("f-min", "reward ≥", "min_reward", True),
    ("f-max", "reward ≤", "max_reward", True),
    ("f-search", "search text", "text", False),
]
#: The placeholders shown where the long ones do not fit whole (a narrow terminal).
SHORT_PLACEHOLDERS = {"error kind": "error", "search text": "search"}
#: Below this many columns the filter fields take two rows, so each stays wide enough to read.
TWO_ROW_FILTERS_BELOW = 100
#: What Traces says when the store holds no rollout of the user's own kinds and no filter is set.
FIRST_STEP = ("No rollouts yet: press e on Environments for a quick eval, or run `workbench eval ENV` "
              "(K shows other kinds of run)")


class FilterInput(Input):
    """A filter field: what was typed is what filters (the known value it may complete is shown after
    it, and taken only with → at its end), and the placeholder shortens rather than being cut where the
    field is narrow."""

    def __init__(self, placeholder: str, **kwargs: Any) -> None:
        super().__init__(placeholder=placeholder, **kwargs)
        self.long_placeholder = placeholder

    def on_resize(self) -> None:
        width = self.content_size.width
        short = SHORT_PLACEHOLDERS.get(self.long_placeholder, self.long_placeholder)
        self.placeholder = self.long_placeholder if len(self.long_placeholder) <= width else short



def _status(r: RolloutSummary) -> tuple[str, str]:
    return ("ok", "green") if r.status == "ok" else (str(r.error_kind or "error"), "red")


def _reward(r: RolloutSummary) -> tuple[str, str]:
    v = r.reward
    return fnum(v), "" if v is None else ("green" if v >= 1 else "yellow" if v > 0 else "")


#: Each column fits its values up to its width; on a narrow screen the lowest priority go first
#: (turns, secs, model, time), so run ids, rewards and statuses are never cut.
COLUMNS = [
    Column("time", 16, lambda r: ftime(r.created_at), priority=4),
    Column("run", 24, lambda r: r.run_id, priority=9),
    Column("env", 24, lambda r: r.env_name, priority=8),
    Column("model", 24, lambda r: r.model, priority=3),  # the registered name, where there is one
    Column("task.s", 8, lambda r: f"{r.task_index}.{r.sample_index}", right=True, priority=7),
    Column("reward", 6, _reward, right=True, priority=9),
    Column("status", 16, _status, priority=8),
    Column("turns", 5, lambda r: str(r.turns), right=True, priority=1),
    Column("secs", 8, lambda r: f"{r.duration_s:.2f}", right=True, priority=2),
    Column("completion", 0, lambda r: r.preview, priority=5, min_width=12),
]


class TracesScreen(WorkbenchAppMixin, Screen[None]):
    TITLE = "Traces"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "focus_search", "Search", id="traces.search"),
        Binding("f", "focus_filters", "Filter", id="traces.filter"),
        Binding("s", "cycle_sort", "Sort", id="traces.sort"),
        Binding("o", "cycle_source", "Source", id="traces.source", show=False),  # every, model, imported, human
        Binding("K", "cycle_kind", "Kind", id="traces.kind"),  # mine, all, probe, validate, debug, play, ...
        Binding("c", "clear_filters", "Clear filters", id="traces.clear", show=False),
        Binding("m", "mark", "Mark", id="traces.mark"),  # once marked, the status line says to press D
        Binding("D", "diff", "Diff with mark", id="traces.diff", show=False),
        Binding("x", "export", "Export", id="traces.export"),
        Binding("r", "refresh", "Refresh", id="traces.refresh", show=False),
        Binding("escape", "focus_table", "Table", show=False),
    ]

    class RolloutLoaded(Message):
        """The rollout Enter opened, read from the store (a ``get_rollout`` row), and the search text it
        was found with (``None``: none): the app shows it, its hits highlighted."""

        def __init__(self, rollout: dict[str, Any], search: str | None = None) -> None:
            super().__init__()
            self.rollout, self.search = rollout, search

    class DiffLoaded(Message):
        """The marked rollout (A) and the one D was pressed on (B), compared: the app shows them."""

        def __init__(self, diff: RolloutDiff) -> None:
            super().__init__()
            self.diff = diff

    class SuggestionsRead(Message, bubble=False):
        """The stored values each filter input suggests, read in a worker."""

        def __init__(self, values: dict[str, list[str]]) -> None:
            super().__init__()
            self.values = values

    class Recounted(Message, bubble=False):
        """``source`` holds ``delta`` rollouts more (or fewer) than the list shows."""

        def __init__(self, source: RolloutSource, delta: int) -> None:
            super().__init__()
            self.source, self.delta = source, delta

    def __init__(self) -> None:
        super().__init__()
        self.filters = Filters()
        self.sort = 0
        self.source: str | None = None  # one of SOURCES (o steps through them); None: every source
        self.kinds: tuple[str, ...] | None = Filters().kinds  # the kinds of run shown (K steps through them)
        self._debounce: Timer | None = None
        self._pending: dict[str, str] = {}
        self._new = 0  # rollouts added to the store since the list was loaded
        self.marked: str | None = None  # the rollout `D` compares against; kept across filters and sorts

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="filters"):
            for wid, placeholder, _, narrow in FILTER_INPUTS:
                validators = [Number()] if wid in ("f-min", "f-max") else None
                yield FilterInput(placeholder, id=wid, classes="narrow" if narrow else "",
                                  validators=validators, valid_empty=True)
        yield Static("", id="traces-status")
        columns = [replace(c, render=self._model_cell) if c.title == "model" else c for c in COLUMNS]
        yield VirtualTable([Column("", 1, self._mark_cell, fit=False, priority=10), *columns], id="traces-table")
        yield WorkbenchFooter()

    def on_resize(self) -> None:
        self.query_one("#filters").set_class(self.size.width < TWO_ROW_FILTERS_BELOW, "-two-rows")

    def on_mount(self) -> None:
        self.on_resize()
        if self._pending:
            self._set_inputs(self._pending)
            self._pending = {}
        self._apply()
        self.query_one(VirtualTable).focus()
        self._load_suggestions()

    @work(thread=True, exit_on_error=False, group="traces-suggest", exclusive=True)
    def _load_suggestions(self) -> None:
        try:
            values = suggestions(self.workbench_app.store)
        except Exception:
            return  # suggestions are a convenience
        post_ui(self, self.SuggestionsRead(values))

    @on(SuggestionsRead)
    def _set_suggesters(self, event: SuggestionsRead) -> None:
        by_field = {field: wid for wid, _, field, _ in FILTER_INPUTS}
        for field, options in event.values.items():
            self.query_one(f"#{by_field[field]}", Input).suggester = SuggestFromList(options, case_sensitive=False)

    @property
    def table(self) -> VirtualTable:
        return self.query_one(VirtualTable)

    # -- filters --------------------------------------------------------------------------------
    def _read_filters(self) -> Filters:
        values: dict[str, Any] = {}
        for wid, _, field, _ in FILTER_INPUTS:
            text = self.query_one(f"#{wid}", Input).value.strip()
            if not text:
                continue
            if field in ("min_reward", "max_reward"):
                try:
                    values[field] = float(text)
                except ValueError:
                    continue  # the input shows itself invalid; ignore it until it parses
            else:
                values[field] = text
        if self.source is not None:
            values["source"] = self.source
        return Filters(**values, kinds=self.kinds)

    def _apply(self) -> None:
        self.filters = self._read_filters()
        source = RolloutSource(self.workbench_app.store, self.filters, SORTS[self.sort][1])
        self.table.set_source(source)
        self._new = 0
        self._show_status()

    def _show_status(self) -> None:
        total = self.table.total
        count = "counting…" if total is None else f"{total:,} rollouts"
        desc = self.filters.describe()
        new = f" · {self._new:+,} since loaded: press r" if self._new else ""
        mark = f" · marked {self.marked}: D on another rollout diffs them" if self.marked else ""
        status = self.query_one("#traces-status", Static)
        if total == 0 and self.filters == Filters():
            status.update(FIRST_STEP)
            return
        status.update(safe_text(  # the filters hold what was typed
            f"{count}{new} · kind: {kind_label(self.filters.kinds)} · sort: {SORTS[self.sort][0]}"
            + (f" · {desc}" if desc else "") + mark))

    def on_screen_resume(self) -> None:
        """Back on Traces (from another screen): say if the store changed, without moving the list."""
        source, shown = self.table.source, self.table.total
        if source is not None and shown is not None:
            self._recount(source, shown)

    @work(thread=True, exit_on_error=False, exclusive=True, group="traces-recount")
    def _recount(self, source: RolloutSource, shown: int) -> None:
        try:
            n = source.count()
        except Exception:
            return
        if n != shown:
            post_ui(self, self.Recounted(source, n - shown))

    @on(Recounted)
    def _note_new(self, event: Recounted) -> None:
        if self.table.source is event.source:
            self._new = event.delta
            self._show_status()

    @on(VirtualTable.Counted)
    def _on_counted(self) -> None:
        self._show_status()

    @on(Input.Changed)
    def _on_changed(self) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(0.3, self._apply_if_changed)

    @on(Input.Submitted)
    def _on_submitted(self) -> None:
        """Enter applies the filters now; the focus stays in the field (escape goes to the table), so
        what is typed next is never taken for a table key."""
        if self._debounce is not None:
            self._debounce.stop()
        self._apply_if_changed()

    def _apply_if_changed(self) -> None:
        if self._read_filters() != self.filters:
            self._apply()

    def _set_inputs(self, values: dict[str, str]) -> None:
        by_field = {field: wid for wid, _, field, _ in FILTER_INPUTS}
        for field, value in values.items():
            self.query_one(f"#{by_field[field]}", Input).value = value

    def set_filters(self, **values: str) -> None:
        """Set some filters (by Filters field name) and show the result, e.g. ``set_filters(run=...)``;
        ``source`` is one of SOURCES. A run's rollouts are shown whatever its kind."""
        self.source = values.pop("source", None)
        if "run_id" in values:
            self.kinds = None
        if not self.is_mounted:
            self._pending.update(values)
            return
        for wid, _, _, _ in FILTER_INPUTS:
            self.query_one(f"#{wid}", Input).value = ""
        self._set_inputs(values)
        self._apply()

    def action_clear_filters(self) -> None:
        self.source = None
        self.kinds = Filters().kinds
        for wid, _, _, _ in FILTER_INPUTS:
            self.query_one(f"#{wid}", Input).value = ""
        self._apply()
        self.table.focus()

    def action_cycle_sort(self) -> None:
        self.sort = (self.sort + 1) % len(SORTS)
        self._apply()

    def action_cycle_source(self) -> None:
        """Every source, then only model rollouts, imported ones, a person's (human), and every source again."""
        order: list[str | None] = [None, *SOURCES]
        self.source = order[(order.index(self.source) + 1) % len(order)]
        self._apply()

    def action_cycle_kind(self) -> None:
        """The user's own kinds, then every kind, then each other kind alone, and the user's own again."""
        self.kinds = next_kinds(self.kinds)
        self._apply()

    def action_refresh(self) -> None:
        self._apply()

    def action_focus_search(self) -> None:
        self.query_one("#f-search", Input).focus()

    def action_focus_filters(self) -> None:
        self.query_one("#f-env", Input).focus()

    def action_focus_table(self) -> None:
        self.table.focus()

    # -- open a rollout -------------------------------------------------------------------------
    @on(VirtualTable.Selected)
    def _on_selected(self, event: VirtualTable.Selected) -> None:
        self._open(event.row.id)

    def _post_loaded(self, read: Callable[[], Message], failed: str) -> None:
        """From a worker thread: post the message ``read`` makes of what it reads, or say why it could not."""
        try:
            message = read()
        except WorkbenchError as e:
            notify_ui(self, str(e), severity="error")
            return
        except Exception as e:
            notify_ui(self, f"{failed}: {e}", severity="error")
            return
        post_ui(self, message)

    @work(thread=True, exit_on_error=False, group="traces-open", exclusive=True)
    def _open(self, rollout_id: str) -> None:
        search = self.filters.text
        self._post_loaded(lambda: self.RolloutLoaded(load_rollout(self.workbench_app.store, rollout_id), search),
                          f"reading rollout {rollout_id} failed")

    @property
    def search_text(self) -> str | None:
        """The search the listed rollouts were found with (a rollout opened over Traces highlights it)."""
        return self.filters.text

    def _model_cell(self, row: RolloutSummary) -> str:
        """The model as the user called it (the run's registered model name), else the model id."""
        source = self.table.source
        return source.model_label(row) if isinstance(source, RolloutSource) else row.model

    # -- mark and diff ------------------------------------------------------------------------------
    def _mark_cell(self, row: RolloutSummary) -> str | tuple[str, str]:
        return ("●", "bold magenta") if row.id == self.marked else ""

    def action_mark(self) -> None:
        """Mark the rollout under the cursor for `D` (again on the marked one: unmark it)."""
        row = self.table.current_row()
        if row is None:
            return
        self.marked = None if row.id == self.marked else row.id
        self.table.refresh()
        self._show_status()

    def action_diff(self) -> None:
        """The marked rollout (A) and the one under the cursor (B), side by side."""
        row = self.table.current_row()
        if row is None:
            return
        if self.marked is None:
            self.notify("mark a rollout with m first, then press D on another one", severity="warning")
        elif row.id == self.marked:
            self.notify("this is the marked rollout: press D on another one to compare them", severity="warning")
        else:
            self._open_diff(self.marked, row.id)

    @work(thread=True, exit_on_error=False, group="traces-diff", exclusive=True)
    def _open_diff(self, a: str, b: str) -> None:
        self._post_loaded(lambda: self.DiffLoaded(load_diff(self.workbench_app.store.get().conn, a, b)),
                          f"comparing {a} and {b} failed")

    # -- export ---------------------------------------------------------------------------------
    def action_export(self) -> None:
        """Ask where to write what the filters select (default: the export folder), then write it."""
        total = self.table.total
        what = ("" if total is None else f"{total:,} rollouts") + (f" · {d}" if (d := self.filters.describe()) else "")
        filters, sort = self.filters, SORTS[self.sort][1]
        dialog = ExportScreen(default_export_path(self.workbench_app.config), what.strip(" ·"))
        self.app.push_screen(dialog, lambda target: self._export_to(filters, sort, target))

    def _export_to(self, filters: Filters, sort: str, target: ExportTarget | None) -> None:
        if target is None:
            return  # cancelled: nothing written
        self.notify(f"exporting to {target.path}…", timeout=2)
        self._export(filters, sort, target)

    @work(thread=True, exit_on_error=False, group="traces-export")
    def _export(self, filters: Filters, sort: str, target: ExportTarget) -> None:
        path, atif = target.path, target.fmt == "atif"
        try:
            write = export_atif if atif else export_jsonl
            n = write(self.workbench_app.store, filters, sort, path)
        except Exception as e:
            notify_ui(self, f"export to {path} failed: {e}", title="export failed", severity="error", timeout=10)
            return
        what = "rollouts as ATIF trajectories (one trial folder each)" if atif else "rollouts"
        notify_ui(self, f"exported {n:,} {what} to {path}", title="export done", timeout=10)
