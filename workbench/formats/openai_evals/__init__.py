"""OpenAI Evals, migrated: an eval object, a run object and JSONL items become a Workbench environment
folder whose rewards are the eval's graders, computed as OpenAI's graders guide defines them.

``import_eval`` writes the folder (``workbench import-eval openai``); ``build_environment`` is what that
folder's ``load_environment`` calls. docs/formats/openai-evals.md says what maps to what.
"""

from workbench.formats.openai_evals.environment import DIALECT, build_environment
from workbench.formats.openai_evals.errors import EvalDefinitionError
from workbench.formats.openai_evals.writer import ImportResult, import_eval

__all__ = ["DIALECT", "EvalDefinitionError", "ImportResult", "build_environment", "import_eval"]
