"""Environment bundles: the reproducible wheel, lock and content hash of an environment (``workbench package``),
the secret scan that guards them, and their verification where they run."""
