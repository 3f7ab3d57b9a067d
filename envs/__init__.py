"""Bundled Workbench environments."""
