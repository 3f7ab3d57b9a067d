"""Provider tokens: keyring first, env vars as fallback, clear errors naming the command that fixes them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backends import fail, null

from tests.cloud.keyring_backend import MemoryKeyring
from workbench.config import credentials
from workbench.config.credentials import (
    PROVIDERS,
    CredentialError,
    MissingTokenError,
    delete_token,
    get_token,
    known_tokens,
    require_token,
    store_token,
)
from workbench.rollouts.client import resolve_api_key

# Built at run time so this file holds nothing a secret scanner would flag.
OPENAI = "sk-" + "test" + "A1b2C3d4E5f6G7h8I9j0" * 2
HF = "hf_" + "Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No provider env vars, no ~/.modal.toml, WORKBENCH_API_KEY unset."""
    for p in PROVIDERS.values():
        for var in p.env:
            monkeypatch.delenv(var, raising=False)
    for var in ("WORKBENCH_API_KEY", "MODAL_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "modal.toml"))
    return tmp_path


def _use(backend: keyring.backend.KeyringBackend) -> Iterator[keyring.backend.KeyringBackend]:
    before = keyring.get_keyring()
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(before)


@pytest.fixture
def memory_keyring(clean_env: Path) -> Iterator[MemoryKeyring]:
    yield from _use(MemoryKeyring())  # type: ignore[misc]


@pytest.fixture
def no_keyring(clean_env: Path) -> Iterator[keyring.backend.KeyringBackend]:
    yield from _use(fail.Keyring())


def test_login_stores_in_keyring_and_logout_removes(memory_keyring: MemoryKeyring) -> None:
    assert get_token("openai") is None
    store_token("openai", f"  {OPENAI}\n")
    assert memory_keyring.entries == {("workbench", "openai"): OPENAI}
    tok = require_token("openai")
    assert (tok.value, tok.source) == (OPENAI, "keyring")
    assert tok.env() == {"OPENAI_API_KEY": OPENAI}
    assert OPENAI not in repr(tok) and OPENAI not in str(tok) and "redacted" in repr(tok)
    assert delete_token("openai") is True
    assert delete_token("openai") is False
    assert memory_keyring.entries == {}
    assert get_token("openai") is None


def test_keyring_comes_first_then_the_env_vars(memory_keyring: MemoryKeyring, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", HF)
    assert (get_token("hf").value, get_token("hf").source) == (HF, "env:HF_TOKEN")
    store_token("hf", "hf_" + "stored" * 6)
    assert get_token("hf").source == "keyring"
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", HF)
    delete_token("hf")
    assert get_token("hf").source == "env:HUGGING_FACE_HUB_TOKEN"


def test_modal_has_an_id_and_a_secret(memory_keyring: MemoryKeyring, monkeypatch: pytest.MonkeyPatch,
                                      clean_env: Path) -> None:
    with pytest.raises(CredentialError, match="ID:SECRET"):
        store_token("modal", "ak-onlytheid")
    store_token("modal", "ak-abc123 : as-def456")
    tok = require_token("modal")
    assert tok.parts == ("ak-abc123", "as-def456")
    assert tok.env() == {"MODAL_TOKEN_ID": "ak-abc123", "MODAL_TOKEN_SECRET": "as-def456"}
    delete_token("modal")
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-fromenv")
    assert get_token("modal") is None  # both variables are needed
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-fromenv")
    assert get_token("modal").env() == {"MODAL_TOKEN_ID": "ak-fromenv", "MODAL_TOKEN_SECRET": "as-fromenv"}
    monkeypatch.delenv("MODAL_TOKEN_ID")
    (clean_env / "modal.toml").write_text('[work]\ntoken_id = "ak-cfg"\ntoken_secret = "as-cfg"\nactive = true\n')
    tok = get_token("modal")
    assert tok.parts == ("ak-cfg", "as-cfg") and tok.source.endswith("modal.toml")


def test_missing_token_names_the_command_that_fixes_it(memory_keyring: MemoryKeyring) -> None:
    for name, cmd, env in [("modal", "workbench login modal", "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"),
                           ("openai", "workbench login openai", "OPENAI_API_KEY"),
                           ("anthropic", "workbench login anthropic", "ANTHROPIC_API_KEY"),
                           ("hf", "workbench login hf", "HF_TOKEN")]:
        with pytest.raises(MissingTokenError) as e:
            require_token(name)
        msg = str(e.value)
        assert f"run `{cmd}`" in msg and env in msg and "\n" not in msg, msg


def test_no_keyring_backend_is_a_clear_error_and_env_vars_still_work(no_keyring: object,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CredentialError) as e:
        store_token("openai", OPENAI)
    assert "no keyring backend" in str(e.value) and "OPENAI_API_KEY" in str(e.value)
    assert OPENAI not in str(e.value)
    with pytest.raises(CredentialError, match="no keyring backend"):
        delete_token("anthropic")
    with pytest.raises(MissingTokenError) as missing:
        require_token("anthropic")
    assert "no keyring backend" in str(missing.value) and "set ANTHROPIC_API_KEY" in str(missing.value)
    assert "`workbench login anthropic`" in str(missing.value)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-" + "x1" * 15)
    assert require_token("anthropic").source == "env:ANTHROPIC_API_KEY"


def test_a_backend_that_drops_tokens_is_not_taken_for_a_store(clean_env: Path) -> None:
    for _ in _use(null.Keyring()):
        with pytest.raises(CredentialError, match="did not keep"):
            store_token("openai", OPENAI)


def test_known_tokens_gathers_every_source_without_values_in_labels(memory_keyring: MemoryKeyring,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store_token("openai", OPENAI)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other-" + "z9" * 12)
    monkeypatch.setenv("HF_TOKEN", HF)
    known = known_tokens()
    assert sorted(v for _, v in known) == sorted([OPENAI, "sk-other-" + "z9" * 12, HF])
    assert all(v not in label for label, v in known)


def test_resolve_api_key_reads_the_login_after_flag_and_env(memory_keyring: MemoryKeyring,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    openai, anthropic = "https://api.openai.com/v1", "https://api.anthropic.com/v1/"
    assert resolve_api_key(None, openai) is None
    store_token("openai", OPENAI)
    store_token("anthropic", "sk-ant-" + "q7" * 12)
    assert resolve_api_key(None, openai) == OPENAI
    assert resolve_api_key(None, "https://API.OpenAI.com:443/v1") == OPENAI
    assert resolve_api_key(None, anthropic) == "sk-ant-" + "q7" * 12
    # A stored login goes to its provider's own API only: never to a local server or a third-party endpoint.
    for other in ("http://127.0.0.1:8000/v1", "https://api.openai.com.evil.example/v1", "https://example.com/v1",
                  None):
        assert resolve_api_key(None, other) is None, other
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")  # OpenAI's, and the convention for compatible endpoints
    assert resolve_api_key(None, openai) == "from-env" and resolve_api_key(None, "http://127.0.0.1:8000/v1") == "from-env"
    assert resolve_api_key(None, anthropic) == "sk-ant-" + "q7" * 12  # never OpenAI's key to Anthropic
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ant-from-env")
    assert resolve_api_key(None, anthropic) == "ant-from-env"
    monkeypatch.setenv("WORKBENCH_API_KEY", "wb-from-env")  # names the key for whatever endpoint is at hand
    assert {resolve_api_key(None, u) for u in (openai, anthropic, "http://127.0.0.1:8000/v1")} == {"wb-from-env"}
    assert resolve_api_key("from-flag", openai) == "from-flag"


def test_unknown_provider(clean_env: Path) -> None:
    with pytest.raises(CredentialError, match="choose one of: modal, openai, anthropic, hf"):
        credentials.require_token("gcp")
