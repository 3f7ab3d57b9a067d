"""Adapters: environments written for other frameworks, run by Workbench as ``wb.Environment`` objects.

Each adapter imports its framework only inside its functions (the framework is an optional extra).
"""
