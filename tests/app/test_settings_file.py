"""What the Settings screen writes: ``update_settings`` keeps the file's comments and other keys, refuses a bad
value in one line without writing, and the hub indexes and model choices read back as the app uses them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workbench.config.settings import (
    Settings,
    add_hub_index,
    load_settings,
    remove_hub_index,
    settings_path,
    update_settings,
)
from workbench.errors import ConfigError

BEFORE = '# my settings\ntheme = "textual-dark"  # the dark one\nmodel = "house"\nbase_url = "http://127.0.0.1:9/v1"\n'


@pytest.fixture
def settings_file() -> Path:
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BEFORE)
    return path


def test_a_change_keeps_the_rest_of_the_file(settings_file: Path) -> None:
    saved = update_settings({("budget", "monthly_usd"): 12.5, ("models", "debugger"): "gpt-small",
                             ("user_name",): "ada"})
    text = settings_file.read_text()
    assert text.startswith(BEFORE) and "monthly_usd = 12.5" in text
    assert saved.monthly_budget_usd == 12.5 and load_settings().models.debugger == "gpt-small"
    update_settings({("budget", "monthly_usd"): None, ("user_name",): None})
    again = load_settings()
    assert again.monthly_budget_usd is None and again.user_name == "" and again.models.debugger == "gpt-small"


@pytest.mark.parametrize(("changes", "said"), [
    ({("budget", "monthly_usd"): -5.0}, "budget.monthly_usd must be a non-negative number, got -5.0"),
    ({("budget", "monthly_usd"): "lots"}, "budget.monthly_usd must be a non-negative number, got 'lots'"),
    ({("quick_eval_n",): 0}, "quick_eval_n must be a whole number of at least 1, got 0"),
    ({("models", "quick_eval"): 3}, "models.quick_eval must be a registered model's name"),
    ({("hub", "indexes", "co"): {"url": "ftp://x"}}, "hub.indexes.co.url must be an http(s) URL, got 'ftp://x'"),
])
def test_a_bad_value_is_one_line_and_nothing_is_written(settings_file: Path, changes: dict[tuple[str, ...], Any],
                                                        said: str) -> None:
    with pytest.raises(ConfigError) as e:
        update_settings(changes)
    assert str(e.value).startswith(said) and "\n" not in str(e.value)
    assert settings_file.read_text() == BEFORE


def test_hub_indexes_are_added_and_removed_with_the_default(settings_file: Path) -> None:
    assert add_hub_index("company", "https://pypi.company.example/simple/").hub.default == "company"
    hub = add_hub_index("public", "https://pypi.org/simple/").hub
    assert hub.default == "company" and list(hub.indexes) == ["company", "public"]
    assert remove_hub_index("company").hub.default == "public"
    assert remove_hub_index("public").hub.default is None and load_settings().hub.indexes == {}
    for bad, said in (("has space", "hub index name 'has space' must be letters"),
                      ("ok", "hub.indexes.ok.url must not hold credentials")):
        with pytest.raises(ConfigError, match=said):
            add_hub_index(bad, "https://user:pw@pypi.example/simple/")
    with pytest.raises(ConfigError, match="no hub index named 'nope'"):
        remove_hub_index("nope")
    assert "pw@" not in settings_file.read_text()


@pytest.mark.parametrize(("choices", "use", "endpoint"), [
    ({}, "quick_eval", ("house", "http://127.0.0.1:9/v1")),  # nothing chosen: the model / base_url settings
    ({"debugger": "gpt-small"}, "debugger", ("gpt-small", None)),  # a registered model: its own endpoint
    ({"debugger": "gpt-small"}, "play_user", ("house", "http://127.0.0.1:9/v1")),
    ({"play_user": ""}, "play_user", ("house", "http://127.0.0.1:9/v1")),  # blank is unset
])
def test_each_use_calls_its_chosen_model_else_the_default(choices: dict[str, str], use: str,
                                                          endpoint: tuple[str | None, str | None]) -> None:
    cfg = Settings(model="house", base_url="http://127.0.0.1:9/v1", models=choices)  # type: ignore[arg-type]
    assert cfg.endpoint_for(use) == endpoint
