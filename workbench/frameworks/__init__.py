"""Other frameworks' environments, run where their own dependencies live (``venvs``)."""

#: The modules of this package that run in a framework's own interpreter, never in Workbench's: standard library
#: and that framework only, each finding the others beside its own file. Workbench's checks of its own imports
#: and dependencies leave them out.
WORKER_SIDE = ("worker_loop", "verifiers_v1_worker", "verifiers_legacy_worker", "verifiers_legacy_checks",
               "program_runs", "program_zygote", "shared_tls", "confined_runs")
