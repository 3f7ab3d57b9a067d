"""Where Workbench keeps its files and settings, and the credentials it may use."""
