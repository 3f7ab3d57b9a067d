"""Provider tokens: stored in the OS keyring by ``workbench login``, read back with env vars as fallback.

One keyring entry per provider, under the service ``workbench`` and the provider's name as the user
(``modal`` stores ``TOKEN_ID:TOKEN_SECRET`` in its one entry). Reading tries, in order: keyring,
the provider's environment variables, and for Modal its own ``~/.modal.toml`` (written by
``modal token new``). A token is never written anywhere else: not to the store, not to logs (its
``repr`` is redacted), and ``workbench.bundles.secrets_scan`` refuses any bundle that contains one.

Keyring is imported lazily; a machine without a keyring backend (``NoKeyringError``) can still use
the env vars, and ``login`` says so in one sentence instead of failing with a traceback.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError

SERVICE = "workbench"


@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    label: str
    env: tuple[str, ...]  # modal: (id var, secret var); others: the vars tried in order
    prompts: tuple[str, ...] = ("token",)
    url: str = ""

    @property
    def parts(self) -> int:
        return len(self.prompts)


PROVIDERS: dict[str, Provider] = {
    "modal": Provider("modal", "Modal", ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"), ("token id", "token secret"),
                      "https://modal.com/settings/tokens"),
    "openai": Provider("openai", "OpenAI", ("OPENAI_API_KEY",), ("API key",), "https://platform.openai.com/api-keys"),
    "anthropic": Provider("anthropic", "Anthropic", ("ANTHROPIC_API_KEY",), ("API key",),
                          "https://console.anthropic.com/settings/keys"),
    "hf": Provider("hf", "Hugging Face", ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"), ("token",),
                   "https://huggingface.co/settings/tokens"),
}


class CredentialError(WorkbenchError):
    """A token cannot be stored, read or removed."""


class MissingTokenError(CredentialError):
    """No token for a provider: the message names the command that fixes it."""


@dataclass(frozen=True, slots=True)
class Token:
    """A provider's token and where it came from. ``value`` is ``ID:SECRET`` for Modal."""

    provider: str
    value: str = field(repr=False)
    source: str  # "keyring" | "env:VAR" | "~/.modal.toml"

    def __repr__(self) -> str:
        return f"Token(provider={self.provider!r}, source={self.source!r}, value=<redacted>)"

    __str__ = __repr__

    @property
    def parts(self) -> tuple[str, ...]:
        """``(token_id, token_secret)`` for Modal, ``(token,)`` otherwise."""
        if provider(self.provider).parts == 2:
            tid, _, secret = self.value.partition(":")
            return (tid, secret)
        return (self.value,)

    def env(self) -> dict[str, str]:
        """The environment variables the provider's own clients read (for a ``modal.Secret``, a subprocess)."""
        p = provider(self.provider)
        return dict(zip(p.env, self.parts, strict=False))


#: A package index's credentials (``workbench login index NAME``): one keyring entry ``index:NAME`` holding
#: ``USERNAME:PASSWORD``; the environment fallback serves every index.
INDEX_ENV = ("WORKBENCH_INDEX_USERNAME", "WORKBENCH_INDEX_PASSWORD")


def index_provider(index: str) -> Provider:
    return Provider(f"index:{index}", f"index {index!r}", INDEX_ENV, ("username", "password"))


def provider(name: str) -> Provider:
    if name.startswith("index:") and len(name) > len("index:"):
        return index_provider(name[len("index:"):])
    try:
        return PROVIDERS[name]
    except KeyError:
        raise CredentialError(f"unknown provider {name!r}; choose one of: {', '.join(PROVIDERS)}") from None


# -- keyring ---------------------------------------------------------------------------------------
def _keyring() -> Any:
    import keyring

    return keyring


def backend_name() -> str:
    """The keyring backend in use, for messages (``SecretService Keyring``, ``fail Keyring``...)."""
    try:
        kr = _keyring().get_keyring()
    except Exception:  # pragma: no cover - a broken keyring configuration
        return "unknown"
    return f"{type(kr).__module__.rsplit('.', 1)[-1]} {type(kr).__name__}"


def _no_backend(action: str, p: Provider) -> CredentialError:
    env = " and ".join(p.env[: p.parts])
    if action == "remove":
        return CredentialError(f"cannot remove the {p.label} token: this machine has no keyring backend, so none is "
                               f"stored there (unset {env} to stop using the one in your environment)")
    return CredentialError(
        f"cannot {action} the {p.label} token: this machine has no keyring backend; set {env} in your "
        f"environment instead, or install a backend (e.g. `pip install keyrings.alt`) and run "
        f"`workbench login {p.name}` again")


def _read_keyring(p: Provider) -> tuple[str | None, bool]:
    """(stored value or None, whether a keyring backend exists)."""
    import keyring.errors

    try:
        return _keyring().get_password(SERVICE, p.name), True
    except keyring.errors.NoKeyringError:
        return None, False
    except keyring.errors.KeyringError as e:
        raise CredentialError(f"cannot read the {p.label} token from keyring ({type(e).__name__}: {e}); "
                              f"unlock your keyring, or set {' and '.join(p.env[: p.parts])}") from None


def store_token(name: str, value: str) -> str:
    """Store a provider's token in keyring (``ID:SECRET`` for Modal). Returns the backend's name."""
    import keyring.errors

    p = provider(name)
    value = normalize(p, value)
    try:
        _keyring().set_password(SERVICE, p.name, value)
        stored = _keyring().get_password(SERVICE, p.name)
    except keyring.errors.NoKeyringError:
        raise _no_backend("store", p) from None
    except keyring.errors.KeyringError as e:
        raise CredentialError(f"keyring refused to store the {p.label} token ({type(e).__name__}: {e}); "
                              f"unlock your keyring and try again") from None
    if stored != value:
        raise CredentialError(f"the keyring backend ({backend_name()}) did not keep the {p.label} token; "
                              f"configure a real backend, or set {' and '.join(p.env[: p.parts])} instead")
    return backend_name()


def delete_token(name: str) -> bool:
    """Remove a provider's token from keyring. False when none was stored."""
    import keyring.errors

    p = provider(name)
    try:
        if _keyring().get_password(SERVICE, p.name) is None:
            return False
        _keyring().delete_password(SERVICE, p.name)
    except keyring.errors.NoKeyringError:
        raise _no_backend("remove", p) from None
    except keyring.errors.PasswordDeleteError:
        return False
    except keyring.errors.KeyringError as e:
        raise CredentialError(f"keyring refused to remove the {p.label} token ({type(e).__name__}: {e})") from None
    return True


def normalize(p: Provider, value: str) -> str:
    """Strip whitespace and check the shape (Modal: ``ID:SECRET``); raise CredentialError when unusable."""
    value = value.strip()
    if p.parts == 2:
        tid, sep, secret = value.partition(":")
        tid, secret = tid.strip(), secret.strip()
        if not sep or not tid or not secret:
            if p.name == "modal":
                raise CredentialError("a Modal token is a token id and a token secret; give them as ID:SECRET "
                                      "(e.g. --token ak-...:as-...), or run `workbench login modal` to be asked for both")
            raise CredentialError(f"the {p.label} credentials are a {p.prompts[0]} and a {p.prompts[1]}; give them "
                                  f"as {p.prompts[0].upper()}:{p.prompts[1].upper()}, or run `workbench login "
                                  f"{p.name.replace(':', ' ')}` to be asked for both")
        value = f"{tid}:{secret}"
    if not value:
        raise CredentialError(f"the {p.label} token is empty; nothing was stored")
    if any(c.isspace() for c in value) and not p.name.startswith("index:"):  # a password may hold a space
        raise CredentialError(f"the {p.label} token contains whitespace; paste the token alone")
    return value


# -- reading ---------------------------------------------------------------------------------------
def _from_env(p: Provider) -> Token | None:
    if p.parts == 2:
        tid, secret = os.environ.get(p.env[0], "").strip(), os.environ.get(p.env[1], "").strip()
        return Token(p.name, f"{tid}:{secret}", f"env:{p.env[0]}") if tid and secret else None
    for var in p.env:
        value = os.environ.get(var, "").strip()
        if value:
            return Token(p.name, value, f"env:{var}")
    return None


def _modal_config_path() -> Path:
    return Path(os.environ.get("MODAL_CONFIG_PATH") or Path.home() / ".modal.toml")


def _from_modal_config() -> Token | None:
    """The active profile of Modal's own config file (``modal token new`` writes it)."""
    path = _modal_config_path()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    profiles = {k: v for k, v in data.items() if isinstance(v, dict)}
    wanted = os.environ.get("MODAL_PROFILE")
    prof = profiles.get(wanted) if wanted else next((v for v in profiles.values() if v.get("active")), None)
    if prof is None and len(profiles) == 1:
        prof = next(iter(profiles.values()))
    if not prof:
        return None
    tid, secret = str(prof.get("token_id") or ""), str(prof.get("token_secret") or "")
    return Token("modal", f"{tid}:{secret}", f"{path}") if tid and secret else None


def _sources(p: Provider) -> Iterator[Token]:
    """Every token the machine holds for ``p``, in reading order (keyring, env vars, Modal's config)."""
    value, _ = _read_keyring(p)
    if value:
        yield Token(p.name, value, "keyring")
    tok = _from_env(p)
    if tok is not None:
        yield tok
    if p.name == "modal":
        tok = _from_modal_config()
        if tok is not None:
            yield tok


def stored_token(name: str) -> str | None:
    """The token ``workbench login`` stored in keyring, or None (no backend, locked, unknown provider)."""
    p = PROVIDERS.get(name)
    if p is None:
        return None
    try:
        return _read_keyring(p)[0] or None
    except Exception:  # a locked or broken keyring: the caller falls back to env vars or flags
        return None


def get_token(name: str) -> Token | None:
    """The provider's token from keyring, else its env vars (else, for Modal, ``~/.modal.toml``)."""
    return next(_sources(provider(name)), None)


def missing_message(name: str) -> str:
    """The one sentence a missing token produces, naming the command that fixes it."""
    p = provider(name)
    _, has_backend = _read_keyring(p)
    env = " and ".join(p.env[: p.parts])
    what = "credentials" if p.name.startswith("index:") else "token"
    login = f"workbench login {p.name.replace(':', ' ', 1)}"
    if has_backend:
        return f"no {p.label} {what}: run `{login}` (or set {env})"
    return (f"no {p.label} {what}, and this machine has no keyring backend for `{login}`: "
            f"set {env}, or install a backend (e.g. `pip install keyrings.alt`) and run `{login}`")


def require_token(name: str) -> Token:
    """The provider's token, or :class:`MissingTokenError` saying which command fixes it."""
    tok = get_token(name)
    if tok is None:
        raise MissingTokenError(missing_message(name))
    return tok


def _index_names() -> list[str]:
    """The package indexes the settings name (their credentials are secrets a bundle must not hold)."""
    try:
        from workbench.config.settings import load_settings

        return [*load_settings().hub.indexes, "*"]
    except Exception:  # unreadable settings: the environment's index credentials are still scanned for
        return ["*"]


def known_tokens() -> list[tuple[str, str]]:
    """(label, value) of every token this machine holds, from every source, for the bundle's secret
    scan. Never raises (a keyring that cannot be read contributes nothing)."""
    out: list[tuple[str, str]] = []
    for p in [*PROVIDERS.values(), *(index_provider(name) for name in _index_names())]:
        try:
            tokens = list(_sources(p))
        except Exception:
            tokens = [t for t in (_from_env(p), _from_modal_config() if p.name == "modal" else None) if t]
        for tok in tokens:
            for what, part in zip(p.prompts, tok.parts, strict=False):
                out.append((f"{p.label} {what} ({tok.source})", part))
    return out
