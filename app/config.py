"""The app's settings are Workbench's settings (:mod:`workbench.config.settings`): one model, one file."""

from __future__ import annotations

from workbench.config.settings import Settings as TuiConfig
from workbench.config.settings import load_settings as load_config
from workbench.config.settings import settings_path as config_path

__all__ = ["TuiConfig", "config_path", "load_config"]
