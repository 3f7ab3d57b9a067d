"""The ``ray`` launch backend: the launched run's roles as Ray actors on any Ray cluster."""
