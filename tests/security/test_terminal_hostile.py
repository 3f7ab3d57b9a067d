"""What Workbench prints and stores, against hostile data: keys inside URLs, escape sequences and Rich
markup inside stored names and messages, a message of many megabytes. The CLI runs as a subprocess on a
real store; each case asserts the one line, the exit code and that nothing stored changed."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import CliResult, assert_user_error, query

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
    for args in (["show", "0000-keyed"], ["runs", "0000-keyed", "--json"], ["runs"], ["show", "0000-keyed", "--json"]):
        res = cli(*args)
        assert res.rc == 0, res.stderr
        assert SECRET not in res.stdout + res.stderr, f"{args} printed the key"
