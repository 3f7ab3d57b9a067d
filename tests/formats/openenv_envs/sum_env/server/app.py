"""The MCP environment's server (``uvicorn server.app:app`` in this folder): its actions are MCP's ``call_tool``."""

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

try:
    from .sum_environment import SumEnvironment
except ImportError:
    from server.sum_environment import SumEnvironment

app = create_app(SumEnvironment, CallToolAction, CallToolObservation, env_name="sum_env", max_concurrent_envs=8)
