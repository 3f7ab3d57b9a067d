"""Other frameworks' environments, run where their own dependencies live (``venvs``)."""
