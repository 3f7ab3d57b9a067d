"""The endpoint as one frozen value: each kind of model spec resolves to the Endpoint it names (a registered
model, a base URL with a model id, a provider's own API, the embedded model server), the value is frozen,
hashable and never shows its key, and no module resolves a model by filling a dummy EvalOptions."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, write_file
from workbench import plugins
from workbench.config.models import add_model
from workbench.errors import ConfigError, OptionError
from workbench.runs.endpoint import Endpoint, resolve_endpoint
from workbench.runs.evaluate import EvalOptions
from workbench.store.prices import Price

KEY = "sk-test-a-key-never-shown"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Private settings (the model registry), no key or endpoint variable from the machine."""
    for var in ("WORKBENCH_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "WORKBENCH_MODEL", "WORKBENCH_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")


FAKE_SERVER = '''
class Server:
    def ensure(self, model, progress=None):
        if progress:
            progress("starting the fake server", None, None)
        return "http://127.0.0.1:4321/v1", f"served/{model or 'default'}"

SERVER = Server()
'''


@pytest.fixture
def fake_embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An ``embedded`` endpoint plugin first on sys.path, as a third-party package would install one."""
    site = tmp_path / "site"
    write_file(site / "wb_fake_endpoint.py", FAKE_SERVER)
    dist = site / "wb_fake_endpoint-0.1.dist-info"
    write_file(dist / "METADATA", "Metadata-Version: 2.1\nName: wb-fake-endpoint\nVersion: 0.1\n")
    write_file(dist / "entry_points.txt", "[workbench.endpoints]\nembedded = wb_fake_endpoint:SERVER\n")
    monkeypatch.syspath_prepend(str(site))
    plugins.refresh()
    yield
    monkeypatch.undo()
    plugins.refresh()


def test_a_registered_model_gives_its_url_id_api_key_source_and_price(monkeypatch: pytest.MonkeyPatch) -> None:
    add_model("house", base_url="http://127.0.0.1:9/v1", model_id="served-id", provider="anthropic",
              api_key_env="HOUSE_KEY", input_price=1.0, output_price=2.0)
    monkeypatch.setenv("HOUSE_KEY", KEY)
    ep = resolve_endpoint("house")
    assert ep == Endpoint("http://127.0.0.1:9/v1", "served-id", "anthropic", "$HOUSE_KEY",
                          Price("served-id", "anthropic", 1.0, 2.0, source="models add house"), "house")
    assert ep.api_key == KEY
    given = resolve_endpoint("house", api_key="sk-given")
    assert (given.api_key, given.key_source) == ("sk-given", "given"), "a key given wins"
    monkeypatch.delenv("HOUSE_KEY")
    with pytest.raises(ConfigError, match=r"\$HOUSE_KEY, which is not set"):
        resolve_endpoint("house")
    with pytest.raises(ConfigError, match="did you mean 'house'"):
        resolve_endpoint("housee")


def test_a_base_url_and_a_model_id(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = resolve_endpoint("my-model", "http://127.0.0.1:8000/v1/")
    assert ep == Endpoint("http://127.0.0.1:8000/v1", "my-model", "openai", "", None, "my-model")
    assert ep.api_key is None
    monkeypatch.setenv("WORKBENCH_MODEL", "from-the-environment")
    assert resolve_endpoint(None, "http://127.0.0.1:8000/v1").model == "from-the-environment"
    monkeypatch.delenv("WORKBENCH_MODEL")
    with pytest.raises(OptionError) as caught:
        resolve_endpoint(None, "http://127.0.0.1:8000/v1")
    assert caught.value.field == "EvalOptions.model" and caught.value.names == {"base_url": "EvalOptions.base_url"}


def test_a_providers_own_api_takes_that_providers_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-not-for-anthropic")
    ep = resolve_endpoint("claude-x", "https://api.anthropic.com/v1")
    assert (ep.key_source, ep.api_key) == ("$ANTHROPIC_API_KEY", KEY)
    other = resolve_endpoint("m", "http://127.0.0.1:8000/v1")
    assert other.key_source == "$OPENAI_API_KEY", "any other endpoint reads OPENAI_API_KEY, as its clients do"


@pytest.mark.usefixtures("fake_embedded")
def test_no_base_url_is_the_embedded_model_server() -> None:
    heard: list[str] = []
    ep = resolve_endpoint("tiny", on_status=lambda what, done, total: heard.append(what))
    assert ep == Endpoint("http://127.0.0.1:4321/v1", "served/tiny", "openai", "", None, "tiny")
    assert heard == ["starting the fake server"]
    assert resolve_endpoint().model == "served/default"


def test_the_value_is_frozen_hashable_and_never_shows_its_key() -> None:
    ep = resolve_endpoint("m", "http://127.0.0.1:8000/v1", api_key=KEY)
    assert ep.api_key == KEY and ep.key_source == "given"
    assert KEY not in repr(ep) and KEY not in str(ep)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ep.model = "other"  # type: ignore[misc]
    same_but_another_key = dataclasses.replace(ep, api_key="sk-other")
    assert ep == same_but_another_key and len({ep, same_but_another_key}) == 1, "the key is not compared"


def test_eval_options_resolve_once_and_keep_what_the_user_named() -> None:
    opts = EvalOptions(env="x", model="m", base_url="http://127.0.0.1:8000/v1")
    ep = opts.resolve()
    assert opts.resolve() is ep and opts.endpoint is ep
    assert (opts.model, opts.base_url) == ("m", "http://127.0.0.1:8000/v1"), "the options are not rewritten"
    given = Endpoint("http://127.0.0.1:1/v1", "given-id")
    assert EvalOptions(env="x", model="m", endpoint=given).resolve() is given


def test_no_module_resolves_a_model_through_a_dummy_eval_options() -> None:
    """Resolving a model is resolve_endpoint's: nothing builds ``EvalOptions(env="")`` or assigns
    ``.base_url``/``.model``/``.provider``/``.price`` of options to hold a resolved endpoint."""
    found = []
    for folder in ("workbench", "app", "cloud_runtime", "local_runtime"):
        for path in (REPO / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "EvalOptions" and any(
                        k.arg == "env" and isinstance(k.value, ast.Constant) and k.value.value == ""
                        for k in node.keywords):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: EvalOptions(env='')")
                targets = node.targets if isinstance(node, ast.Assign) else []
                for t in targets:
                    for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                        if isinstance(el, ast.Attribute) and el.attr in ("provider", "price", "model_name") and \
                                getattr(el.value, "id", "") in ("opts", "teacher", "student", "sim", "options"):
                            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {el.value.id}.{el.attr} =")  # type: ignore[attr-defined]
                    if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Call) and \
                            getattr(node.value.func, "id", getattr(node.value.func, "attr", "")) == "resolve_endpoint":
                        found.append(f"{path.relative_to(REPO)}:{node.lineno}: a tuple from resolve_endpoint")
    assert not found, "\n".join(found)
