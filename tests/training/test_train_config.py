"""The run configuration of `workbench train`: TOML, dotted overrides, nearest-key errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.errors import ConfigError
from workbench.training.run_config import parse_overrides, resolve, to_toml


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


def _env_package(root: Path, train_toml: str) -> Path:
    pkg = root / "shipenv"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import workbench as wb\n\n"
        "def load_environment():\n"
        "    tasks = wb.TaskSet.from_records([{'prompt': 'hi', 'answer': 'x'}])\n"
        "    rubric = wb.Rubric()\n"
        "    rubric.reward(lambda completion: 1.0)\n"
        "    return wb.Environment(name='shipenv', tasks=tasks, harness=wb.SingleTurn(), rubric=rubric)\n")
    (pkg / "train.toml").write_text(train_toml)
    return pkg


def test_an_environment_ships_its_run_config_below_file_and_flags(tmp_path: Path) -> None:
    pkg = _env_package(tmp_path, '[env]\nname = "elsewhere"\nargs = {n = 5}\n[loop]\nmax_steps = 40\n'
                                 'groups_per_step = 3\n[trainer]\nlr = 0.003\n')
    cfg = resolve(None, {}, str(pkg))
    # The shipped file configures the env it sits in (its [env] name is ignored) ...
    assert cfg.env == str(pkg) and cfg.env_args == {"n": 5}
    assert (cfg.loop.max_steps, cfg.loop.groups_per_step, cfg.trainer["lr"]) == (40, 3, 0.003)
    # ... under the user's config file and the command line.
    f = tmp_path / "run.toml"
    f.write_text(f'[env]\nname = "{pkg}"\n[loop]\nmax_steps = 7\n')
    cfg = resolve(f, {"trainer.lr": 0.02})
    assert (cfg.loop.max_steps, cfg.loop.groups_per_step, cfg.trainer["lr"]) == (7, 3, 0.02)
    # The bundled arithmetic env ships one too; --dry-run output round-trips through it.
    assert resolve(None, {}, "arithmetic").loop.max_steps != 20


def test_a_broken_shipped_run_config_names_its_file(tmp_path: Path) -> None:
    pkg = _env_package(tmp_path, "[loop\nmax_steps = 3\n")
    with pytest.raises(ConfigError, match=r"shipenv/train\.toml is not valid TOML"):
        resolve(None, {}, str(pkg))
    (pkg / "train.toml").write_text("[looop]\nmax_steps = 3\n")
    with pytest.raises(ConfigError, match=r"train\.toml: unknown section 'looop'.*loop"):
        resolve(None, {}, str(pkg))
