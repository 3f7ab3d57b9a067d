"""The environment templates ``workbench new NAME --template ...`` copies (see :mod:`workbench.authoring.templates`).

Each subpackage is a complete, working environment written only against the public authoring API,
with comments that teach. The string ``__env_name__`` is replaced by the new environment's name
when a template is copied; the templates themselves load as they are (tests validate them).
"""
