"""What Workbench prints and stores, against hostile data: keys inside URLs, escape sequences and Rich
markup inside stored names and messages, a message of many megabytes. The CLI runs as a subprocess on a
real store; each case asserts the one line, the exit code and that nothing stored changed."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    CliResult,
    MockServer,
    assert_user_error,
    cli_environment,
    last_json,
    mock_args,
    query,
    run_workbench,
    write_file,
)

# slow: a CLI process per hostile string and command
pytestmark = pytest.mark.slow

SECRET = "sk-live-0123456789abcdef"

# -- keys in URLs ------------------------------------------------------------------------------------
#: (what, URL): each holds a credential, which is refused and never printed.
KEYED_URLS = [
    ("key", f"http://127.0.0.1:9/v1?key={SECRET}"),
    ("api_key", f"http://127.0.0.1:9/v1?api_key={SECRET}&api-version=2024-01-01"),
    ("apikey", f"http://127.0.0.1:9/v1?apikey={SECRET}"),
    ("X-Api-Key", f"http://127.0.0.1:9/v1?X-Api-Key={SECRET}"),
    ("token", f"http://127.0.0.1:9/v1?token={SECRET}"),
    ("access_token", f"https://example.com/v1?access_token={SECRET}#frag"),
    ("secret", f"http://127.0.0.1:9/v1?secret={SECRET}"),
    ("password", f"http://127.0.0.1:9/v1?password={SECRET}"),
    ("sig", f"http://127.0.0.1:9/v1?sv=1&sig={SECRET}"),
    ("user:password@", f"http://user:{SECRET}@127.0.0.1:9/v1"),
    ("user@", f"http://{SECRET}@127.0.0.1:9/v1"),
    ("user:password@ and an IPv6 host", f"http://u:{SECRET}@[::1]:9/v1"),
]


def _counts(db: Path) -> dict[str, int]:
    return {t: query(db, f"SELECT count(*) FROM {t}")[0][0] for t in ("run", "rollout", "rollout_error")}


@pytest.fixture
def made_store(store_path: Path) -> Path:
    from workbench.store import Store

    store_path.parent.mkdir(parents=True, exist_ok=True)
    Store(str(store_path)).close()
    return store_path


def _registry(cli_env: dict[str, str]) -> Path:
    return Path(cli_env["XDG_CONFIG_HOME"]) / "workbench" / "models.json"


@pytest.mark.parametrize(("what", "url"), KEYED_URLS, ids=[w for w, _ in KEYED_URLS])
def test_a_url_with_a_credential_is_refused(cli: Callable[..., CliResult], cli_env: dict[str, str],
                                            made_store: Path, what: str, url: str) -> None:
    assert cli("models", "add", "house", "--base-url", "http://127.0.0.1:9/v1?api-version=1", "--model-id", "m").rc == 0
    registry = _registry(cli_env)
    before = registry.read_text() if registry.exists() else None
    counts = _counts(made_store)
    for args in (["models", "add", "keyed", "--base-url", url],
                 ["eval", "arithmetic", "--base-url", url, "-m", "m", "-n", "1"]):
        res = cli(*args)
        line = assert_user_error(res, "credential")
        assert SECRET not in res.stderr + res.stdout, f"{' '.join(args[:2])} printed the key: {line}"
        assert res.rc == 2
    assert (registry.read_text() if registry.exists() else None) == before, "the registry changed"
    assert _counts(made_store) == counts, "a refused eval stored something"
    assert query(made_store, "PRAGMA integrity_check") == [("ok",)]


KEYED = f"http://127.0.0.1:9/v1?api_key={SECRET}"
#: Every option that takes an endpoint's URL.
URL_OPTIONS = [
    ["debug", "arithmetic", "--base-url", KEYED, "-m", "m"],
    ["probe", "arithmetic", "--base-url", KEYED, "-m", "m"],
    ["validate", "arithmetic", "--base-url", KEYED, "--model", "m"],
    ["optimize", "arithmetic", "-m", "m", "--base-url", KEYED, "--reflection-model", "m"],
    ["optimize", "arithmetic", "-m", "m", "--reflection-base-url", KEYED, "--reflection-model", "m"],
    ["distill", "arithmetic", "--teacher", "m", "--teacher-base-url", KEYED, "--student", "tiny"],
    ["play", "arithmetic", "--base-url", KEYED],
]


@pytest.mark.parametrize("args", URL_OPTIONS, ids=[f"{a[0]} {a[-4] if a[0] == 'optimize' else ''}" for a in URL_OPTIONS])
def test_every_url_option_refuses_a_credential(cli: Callable[..., CliResult], made_store: Path,
                                               args: list[str]) -> None:
    counts = _counts(made_store)
    res = cli(*args)
    assert_user_error(res, "credential", "[redacted]")
    assert SECRET not in res.stderr + res.stdout and res.rc == 2
    assert _counts(made_store) == counts


def test_a_url_without_a_credential_is_kept(cli: Callable[..., CliResult], cli_env: dict[str, str]) -> None:
    url = "http://127.0.0.1:9/v1?api-version=2024-01-01"
    res = cli("models", "add", "azure", "--base-url", url, "--model-id", "m")
    assert res.rc == 0, res.stderr
    assert json.loads(_registry(cli_env).read_text())["azure"]["base_url"] == url


def test_a_registry_written_with_a_key_in_a_url_is_refused_by_name(cli: Callable[..., CliResult],
                                                                    cli_env: dict[str, str], made_store: Path) -> None:
    registry = _registry(cli_env)
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text(json.dumps({"old": {"base_url": f"http://127.0.0.1:9/v1?key={SECRET}", "model_id": "m"}}))
    before = registry.read_text()
    for args in (["eval", "arithmetic", "-m", "old", "-n", "1"], ["models", "list"]):
        res = cli(*args)
        assert_user_error(res, str(registry), "'old'", "credential")
        assert SECRET not in res.stderr + res.stdout
    assert registry.read_text() == before and _counts(made_store)["run"] == 0


@pytest.mark.parametrize(("what", "url"), KEYED_URLS[::3], ids=[w for w, _ in KEYED_URLS[::3]])
def test_a_stored_url_never_holds_its_credential(cli: Callable[..., CliResult], made_store: Path, what: str,
                                                 url: str) -> None:
    """Whatever reaches the store (a URL from an older version, another writer) is kept without its key, in
    the run's base_url, its config and the text of a run error, and is printed so."""
    from workbench.store import Store

    with Store(str(made_store)) as store:
        store.create_run("0000-keyed", kind="eval", env_name="arithmetic", model="m", base_url=url,
                         config={"env": "arithmetic", "base_url": url})
        store.update_run("0000-keyed", error=f"cannot reach the model endpoint {url} (refused)")
    raw = sqlite3.connect(made_store).execute("SELECT base_url, config, error FROM run").fetchone()
    assert SECRET not in "".join(raw) and "[redacted]" in raw[0]
    with sqlite3.connect(made_store) as conn:  # as a store written by an older version holds it
        conn.execute("UPDATE run SET base_url=?, error=?", (url, f"failed at {url}"))
    for args in (["show", "0000-keyed"], ["runs", "0000-keyed", "--json"], ["runs"], ["show", "0000-keyed", "--json"]):
        res = cli(*args)
        assert res.rc == 0, res.stderr
        assert SECRET not in res.stdout + res.stderr, f"{args} printed the key"


# -- escape sequences and markup in stored data ------------------------------------------------------
#: What a hostile import or environment puts in names and text: unbalanced and balanced Rich markup, an
#: OSC 52 clipboard write, clear-screen and a window title.
HOSTILE = "[/x] [bold red]red[/] \x1b]52;c;SGVsbG8=\x07 \x1b[2J \x1b]0;title\x07 end"
SHOWN = "[/x] [bold red]red[/] ␛]52;c;SGVsbG8=␇ ␛[2J ␛]0;title␇ end"  # the same, as the terminal must show it
MODEL = "m[/x]\x1b]0;t\x07"
MODEL_SHOWN = "m[/x]␛]0;t␇"
HOSTILE_ENV = '''
import workbench as wb

HOSTILE = {hostile!r}


def look_up(query: str) -> str:
    """Look something up."""
    return "found " + HOSTILE


def correct(completion: str, answer: str) -> float:
    return 1.0


def wordy(completion: str) -> float:
    return 0.5


def load_environment() -> wb.Environment:
    rubric = wb.Rubric()
    rubric.reward(correct, name="correct" + HOSTILE)
    rubric.metric(wordy, name="metric" + HOSTILE)
    return wb.Environment(
        name="hostile",
        tasks=wb.TaskSet.from_records([{{"prompt": "say " + HOSTILE, "answer": HOSTILE}}]),
        rubric=rubric,
        harness=wb.ToolLoop(tools=[look_up], max_turns=3),
    )
'''
#: The model calls the env's tool with hostile arguments, then a tool that does not exist (its name
#: hostile), then answers hostile text.
SCRIPT = [
    {"tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "look_up", "arguments": json.dumps({"query": HOSTILE})}}]},
    {"tool_calls": [{"id": "c2", "type": "function", "function": {"name": MODEL, "arguments": "{}"}}]},
    "the answer " + HOSTILE,
]


@pytest.fixture(scope="module")
def hostile_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], list[str]]:
    """A store holding two real eval runs (of 1, then 2 rollouts) whose model, env text, answer, tool and
    reward names are hostile; (the CLI's environment, [run ids, newest first])."""
    home = tmp_path_factory.mktemp("hostile")
    env = cli_environment(home, home / "store.db")
    path = write_file(home / "hostile.py", HOSTILE_ENV.format(hostile=HOSTILE))
    mock = MockServer(mock_args("script", "--by-turn", script=SCRIPT, models=MODEL), home / "mock.log")
    try:
        for r in ("1", "2"):  # the second, newest, run has two rollouts
            res = run_workbench(["eval", path, "--base-url", mock.base_url, "-m", MODEL, "-n", "1", "-r", r, "--json"],
                                env)
            assert res.rc == 0, res.stderr
    finally:
        mock.stop()
    runs = [r["id"] for r in last_json(run_workbench(["runs", "--json"], env).stdout)["runs"]]
    return env, runs


#: (command, what its output must show): every command that prints stored names and text.
SHOWS: list[tuple[list[str], list[str]]] = [
    (["show", "{a}"], [MODEL_SHOWN, "correct" + SHOWN]),
    (["show", "{a}.0.0"], [MODEL_SHOWN, "say " + SHOWN, "found " + SHOWN, "the answer " + SHOWN,
                           "metric" + SHOWN, "look_up("]),
    (["show", "{a}.0.0", "--full"], [MODEL_SHOWN, "say " + SHOWN]),
    (["runs"], [MODEL_SHOWN]),
    (["runs", "{a}"], [MODEL_SHOWN]),
    (["diff", "{a}.0.0", "{a}.0.1"], [MODEL_SHOWN, "the answer " + SHOWN]),
    (["compare", "{a}", "{b}"], [MODEL_SHOWN]),
]


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
@pytest.mark.parametrize(("args", "shown"), SHOWS, ids=[" ".join(a[:2]) + f" {i}" for i, (a, _) in enumerate(SHOWS)])
def test_stored_text_is_printed_as_text(hostile_runs: tuple[dict[str, str], list[str]], args: list[str],
                                        shown: list[str], terminal: bool) -> None:
    env, (a, b) = hostile_runs
    if terminal:  # Rich writes its own styles then: data's sequences must still not reach the terminal
        env = {k: v for k, v in env.items() if k != "NO_COLOR"} | {"FORCE_COLOR": "1", "TERM": "xterm-256color"}
    before = query(Path(env["WORKBENCH_DB"]), "SELECT count(*), total(reward) FROM rollout")
    res = run_workbench([x.format(a=a, b=b) for x in args], env)
    assert res.rc == 0 and "Traceback" not in res.stderr, res.stderr
    out = res.stdout
    for raw in ("\x1b]", "\x1b[2J", "\x07"):
        assert raw not in out + res.stderr, f"{raw!r} reached the terminal"
    if not terminal:
        assert "\x1b" not in out, "an escape byte reached the terminal"
        for text in shown:
            assert text in out, f"{text!r} is not shown as it is in:\n{out[:3000]}"
    else:
        assert MODEL_SHOWN in out, out[:3000]
    assert query(Path(env["WORKBENCH_DB"]), "SELECT count(*), total(reward) FROM rollout") == before


def test_hub_show_prints_a_card_as_text(tmp_path: Path) -> None:
    """``hub show``'s printer, given a card whose every field is hostile, in a real process."""
    script = write_file(tmp_path / "card.py", f'''
        from workbench.cli.hub_cmd import print_card
        H = {HOSTILE!r}
        print_card({{"env": H, "version": H, "index": H, "hash": H, "env_version": H, "tasks": H, "harness": H,
                    "forked_from": {{"name": H, "version": H, "hash": H}}, "description": H,
                    "rewards": [{{"name": H, "kind": H, "weight": 1.0, "doc": H}}],
                    "results": [{{"model": H, "mean_reward": 0.5, "rollouts": H, "env_version": H, "date": H}}],
                    "readme": H}})
    ''')
    env = cli_environment(tmp_path)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and SHOWN in p.stdout and "[/x]" in p.stdout


def test_hub_show_of_a_hostile_card_from_an_index(tmp_path: Path, package_index: Callable[..., Any]) -> None:
    """``workbench hub show`` against a real index whose card is hostile wherever the hub lets a card be."""
    from tests.hub.test_hub import ADDER, README, Home
    from tests.security.test_hub_hostile import _forged_wheel

    write_file(tmp_path / "src" / "adder" / "README.md", README)
    adder = write_file(tmp_path / "src" / "adder" / "__init__.py", ADDER).parent
    index = package_index(private=True)
    card = {"env": "hostilecard", "version": "0.1.0", "hash": "0" * 64, "env_version": "0" * 12, "tasks": 3,
            "description": HOSTILE, "harness": HOSTILE, "readme": HOSTILE,
            "rewards": [{"name": "r" + HOSTILE, "kind": "reward", "weight": 1.0, "doc": HOSTILE}],
            "results": [{"model": MODEL, "mean_reward": 0.5, "rollouts": 3, "env_version": "0" * 12,
                         "date": "2026-01-01", "pass_at_k": {"pass@1": 0.5}}]}
    _forged_wheel(index, adder, "hostilecard", "0.1.0", card=card)
    you = Home(tmp_path / "you", index)
    for env in ({}, {"FORCE_COLOR": "1", "TERM": "xterm-256color", "NO_COLOR": ""}):
        res = you("hub", "show", "hostilecard", env=env)
        assert res.rc == 0 and "Traceback" not in res.stderr, res.stderr
        for raw in ("\x1b]", "\x1b[2J", "\x07"):
            assert raw not in res.stdout, f"{raw!r} reached the terminal"
        if not env:
            assert "\x1b" not in res.stdout and SHOWN in res.stdout and MODEL_SHOWN in res.stdout, res.stdout


# -- a message of many megabytes ---------------------------------------------------------------------
BIG_ENV = '''
import workbench as wb


def load_environment() -> wb.Environment:
    return wb.Environment(
        name="big",
        tasks=wb.TaskSet.from_records([{"prompt": "x" * 3_000_000, "answer": "1"}]),
        rubric=wb.Rubric(),
        harness=wb.SingleTurn(),
    )
'''


def test_a_long_message_is_cut_with_its_size_said(cli: Callable[..., CliResult], tmp_path: Path,
                                                   mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("echo")  # the answer is the 3 MB prompt again
    res = cli("eval", write_file(tmp_path / "big.py", BIG_ENV), "--base-url", mock.base_url, "-m", "mock-model",
              "-n", "1", "--json")
    assert res.rc == 0, res.stderr
    rollout = last_json(res.stdout)["run_id"] + ".0.0"
    cut = cli("show", rollout)
    assert cut.rc == 0, cut.stderr
    assert len(cut.stdout) < 200_000, f"show printed {len(cut.stdout):,} characters"
    assert cut.stdout.count("… [3.0 MB more, --full to print all]") == 2  # the prompt and the reply
    full = cli("show", rollout, "--full")
    assert full.rc == 0 and "x" * 100_000 in full.stdout.replace("│", "").replace(" ", "").replace("\n", "")
    assert "--full to print all" not in full.stdout


# -- the app -----------------------------------------------------------------------------------------
async def test_the_app_shows_stored_text_as_text(hostile_runs: tuple[dict[str, str], list[str]], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The traces of the hostile run, then a rollout's detail, then the runs screen: nothing crashes, no
    escape byte is drawn, the names are shown as they are."""
    pytest.importorskip("textual")
    from workbench_app.config import TuiConfig
    from workbench_app.main import WorkbenchApp
    from workbench_app.screens.rollout_detail import RolloutDetailScreen
    from workbench_app.widgets.virtual_table import VirtualTable

    from tests.app.conftest import SIZE, screen_text, wait_until

    env, (a, _) = hostile_runs
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "PYTHON_KEYRING_BACKEND"):
        monkeypatch.setenv(var, env[var])
    app = WorkbenchApp(Path(env["WORKBENCH_DB"]), config=TuiConfig(export_dir=tmp_path / "exports"),
                       discover_fn=list, watch=False, mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        table = await wait_until(pilot, lambda: app.screen.query(VirtualTable) and app.screen.query_one(VirtualTable),
                                 what="the traces table")
        await wait_until(pilot, lambda: table.total == 3 and table.row(0) is not None, what="the three rollouts")
        row = next(i for i in range(table.row_count) if table.row(i).id == f"{a}.0.0")
        lines = "".join(seg.text for y in range(1, 4) for seg in table.render_line(y))
        assert "\x1b" not in lines, lines
        assert "m[/x]␛]0;" in lines and "the answer [/x] [bold red]red[/] ␛]52;c" in lines, lines
        await pilot.press(*["down"] * row, "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, RolloutDetailScreen),
                                  what="the rollout's detail")
        await pilot.pause()
        text = screen_text(app)
        assert "\x1b" not in text and "\x07" not in text
        for shown in (MODEL_SHOWN, "say " + SHOWN[:40], "correct" + SHOWN[:40], "found " + SHOWN[:40]):
            assert shown in text, f"{shown!r} not shown in:\n{text}"
        await pilot.press("d")  # the same rollout in the Debugger, read-only
        await wait_until(pilot, lambda: type(app.screen).__name__ == "DebuggerScreen", what="the debugger")
        await wait_until(pilot, lambda: "say " + SHOWN[:20] in screen_text(app), what="the debugger's transcript")
        assert "\x1b" not in screen_text(app)
        await pilot.press("3")  # the runs screen, with the run's summary
        await wait_until(pilot, lambda: MODEL_SHOWN in screen_text(app), what="the runs screen")
        assert "\x1b" not in screen_text(app)
        app.screen.notify("failed: " + HOSTILE, severity="error")  # an error's text holds data too
        await pilot.pause(0.3)  # drawn: markup in it would raise here, a control character would be drawn
        assert [n.message for n in app._notifications] == ["failed: " + SHOWN]
