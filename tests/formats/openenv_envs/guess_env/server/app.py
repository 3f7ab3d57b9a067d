"""The guessing environment's server (``uvicorn server.app:app`` in this folder); ``GUESS_MAX_SESSIONS``
sessions at once (default 8)."""

import os

from openenv.core.env_server.http_server import create_app

try:
    from ..models import GuessAction, GuessObservation
    from .guess_environment import GuessEnvironment
except ImportError:
    from models import GuessAction, GuessObservation
    from server.guess_environment import GuessEnvironment

app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess_env", max_concurrent_envs=int(os.environ.get("GUESS_MAX_SESSIONS", "8")))
