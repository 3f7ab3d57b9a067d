"""The app's settings are Workbench's settings (:mod:`workbench.config.settings`): one model, one file."""

from __future__ import annotations

from workbench.config.settings import Settings as TuiConfig
from workbench.config.settings import load_settings as load_config
from workbench.config.settings import settings_path as config_path

#: What the Settings screen edits, copied into the app's settings once the file holds it.
EDITED = ("models", "budget", "user_name", "hub")


def apply_settings(config: TuiConfig, saved: TuiConfig) -> None:
    """Use what the settings file now holds (``saved``) for what the Settings screen edits, at once: the
    rest of the app's ``config`` stays as it started (its theme, its endpoint, what a test gave it)."""
    for name in EDITED:
        setattr(config, name, getattr(saved, name))


__all__ = ["EDITED", "TuiConfig", "apply_settings", "config_path", "load_config"]
