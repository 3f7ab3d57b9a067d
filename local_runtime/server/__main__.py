"""``python -m local_runtime.server``: the embedded server's command line."""

from local_runtime.server.serve import main

raise SystemExit(main())
