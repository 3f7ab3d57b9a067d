"""The echo environment's server (``uvicorn server.app:app`` in this folder)."""

from openenv.core.env_server.http_server import create_app

try:
    from ..models import EchoAction, EchoObservation
    from .echo_environment import EchoEnvironment
except ImportError:
    from models import EchoAction, EchoObservation
    from server.echo_environment import EchoEnvironment

app = create_app(EchoEnvironment, EchoAction, EchoObservation, env_name="echo_env", max_concurrent_envs=8)
