"""Package indexes and uv: where environment packages come from and go to (``indexes.py``), and the uv that
locks, installs and uploads them (``uv.py``). Below ``bundles/`` (a bundle's lock) and ``hub/`` (publish, pull)."""
