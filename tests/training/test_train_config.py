"""The run configuration of `workbench train`: TOML, dotted overrides, nearest-key errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.errors import ConfigError
from workbench.train_config import parse_overrides, resolve, to_toml


def test_overrides_parse_toml_values() -> None:
    got = parse_overrides(["--trainer.lr", "1e-4", "--loop.sync=true", "--trainer.target_modules", '["q_proj"]',
                           "--algorithm.name", "rloo"])
    assert got == {"trainer.lr": 1e-4, "loop.sync": True, "trainer.target_modules": ["q_proj"],
                   "algorithm.name": "rloo"}
    with pytest.raises(ConfigError, match="needs a value"):
        parse_overrides(["--trainer.lr"])
    with pytest.raises(ConfigError, match="--section.key VALUE"):
        parse_overrides(["lr", "1"])


def test_file_then_env_then_overrides(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text('[env]\nname = "wordle"\nargs = {max_turns = 3}\n[loop]\nmax_steps = 7\n[trainer]\nlr = 0.01\n')
    cfg = resolve(f, {"trainer.lr": 0.02})
    assert cfg.env == "wordle" and cfg.env_args == {"max_turns": 3} and cfg.loop.max_steps == 7
    assert cfg.trainer["lr"] == 0.02
    assert resolve(f, None, "arithmetic").env == "arithmetic"


def test_dry_run_toml_round_trips(tmp_path: Path) -> None:
    cfg = resolve(None, {"loop.sync": True, "algorithm.name": "rloo", "env.args": {"n": 10}}, "arithmetic")
    assert cfg.loop.async_level == 0 and cfg.raw["loop"]["async_level"] == 0
    f = tmp_path / "again.toml"
    f.write_text(to_toml(cfg.raw))
    assert resolve(f).raw == cfg.raw


@pytest.mark.parametrize(("overrides", "message"), [
    ({"trainer.lrr": 1}, "unknown key trainer.lrr (did you mean 'lr'?)"),
    ({"loop.max_step": 1}, "unknown key loop.max_step (did you mean 'max_steps'?)"),
    ({"trainr.lr": 1}, "did you mean 'trainer'?"),
    ({"loop.max_steps": 0}, "loop.max_steps must be a positive integer"),
    ({"loop.async_level": 3}, "exceeds loop.max_off_policy_steps"),
    ({"algorithm.name": "grop"}, "did you mean 'grpo'?"),
    ({"algorithm.scale_rewrds": True}, "did you mean"),
    ({"loss.name": "kl"}, "choose pg or ce"),
    ({"trainer.normalization": "tokens"}, "did you mean 'token'?"),
])
def test_bad_config_names_the_problem(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        resolve(None, overrides, "arithmetic")
    assert message in str(e.value)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        resolve(tmp_path / "nope.toml", None, "arithmetic")
    bad = tmp_path / "bad.toml"
    bad.write_text("[loop\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        resolve(bad, None, "arithmetic")
    bad.write_text("[lop]\nmax_steps = 1\n")
    with pytest.raises(ConfigError, match="unknown section 'lop' \\(did you mean 'loop'\\?\\)"):
        resolve(bad, None, "arithmetic")
    with pytest.raises(ConfigError, match="no environment"):
        resolve(None, None, None)
