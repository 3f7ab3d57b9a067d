"""Keyring backends for the tests: real ``keyring.backend.KeyringBackend`` subclasses, no mocks.

``MemoryKeyring`` lives in the test process (``keyring.set_keyring(MemoryKeyring())``). ``FileKeyring``
keeps its entries in the JSON file named by ``WORKBENCH_TEST_KEYRING`` so a ``workbench login``
subprocess and the test can both see them (``PYTHON_KEYRING_BACKEND=tests.cloud.keyring_backend.FileKeyring``).
Both have a priority below keyring's own fallbacks, so importing this module never changes which
backend keyring picks by itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError

PRIORITY = -10.0


class MemoryKeyring(KeyringBackend):
    priority = PRIORITY  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.entries.pop((service, username), None) is None:
            raise PasswordDeleteError(f"no entry for {service}/{username}")


class FileKeyring(KeyringBackend):
    priority = PRIORITY  # type: ignore[assignment]

    @property
    def path(self) -> Path:
        return Path(os.environ["WORKBENCH_TEST_KEYRING"])

    def _load(self) -> dict[str, str]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def _save(self, data: dict[str, str]) -> None:
        self.path.write_text(json.dumps(data, sort_keys=True))

    def get_password(self, service: str, username: str) -> str | None:
        return self._load().get(f"{service}/{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        data = self._load()
        data[f"{service}/{username}"] = password
        self._save(data)

    def delete_password(self, service: str, username: str) -> None:
        data = self._load()
        if data.pop(f"{service}/{username}", None) is None:
            raise PasswordDeleteError(f"no entry for {service}/{username}")
        self._save(data)
