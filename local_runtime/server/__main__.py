"""``python -m workbench_local.server``: the embedded server's command line."""

from workbench_local.server.serve import main

raise SystemExit(main())
