"""The gateway: a product's own traffic through Workbench (``workbench gateway``): its keys, its routes, the
server that forwards and records each exchange."""
