"""Use cases: one function per job a person does, called alike by every face.

The command line (``workbench.cli``), ``workbench mcp`` and the app each call the function here and only
render its answer their own way, so the same question gets the same answer wherever it is asked. One
module per use case:

- ``environments`` — every environment Workbench can run, with its version and origin
  (``workbench envs``, the ``list_environments`` tool, the app's Environments screen);
- ``evaluation`` — an eval, its summary (:class:`~workbench.usecases.evaluation.EvalSummary`) and the
  "every rollout failed" error (``workbench eval``, the ``run_eval`` tool, ``wb.eval``);
- ``runs`` — the run listing of the kinds asked for (the user's own by default; a probe as one entry), a
  probe opened, a run's rollouts paged, the rollout search (``workbench runs``/``show``, the ``list_runs``
  and ``search_rollouts`` tools, the app's Runs and Traces);
- ``comparison`` — runs side by side (``workbench compare``, the app's Compare screen, ``wb.compare``);
- ``launch`` — the launch pre-flight: plan, budgets, memory fit, the backend's checks (``workbench launch``,
  the ``plan_launch`` tool, the app's launch dialog), each backend reached through the registry.
- ``formats`` — an environment exported as a verifiers package, an OpenAI eval imported as an environment
  folder (``workbench export-env``/``import-eval``, the app's Environments screen).

The eval card is ``workbench.hub.browse.show`` (read) and ``workbench.hub.card_view`` (shown); a probe is
``workbench.runs.probe.probe_env``. Nothing here imports a face or a runtime.
"""
