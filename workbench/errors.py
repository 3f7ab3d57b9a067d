"""Errors a user can cause. Each carries one clear sentence for stderr (DESIGN.md conventions)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class WorkbenchError(Exception):
    """Base class for errors that are shown to the user as one line, without a traceback."""

    exit_code = 2


class EnvLoadError(WorkbenchError):
    """An environment could not be found, imported or built."""


class RubricError(EnvLoadError):
    """A reward or metric function is malformed (for example it asks for an unknown argument)."""


class ConfigError(WorkbenchError):
    """A flag, config value or JSON argument is invalid."""


class StoreError(WorkbenchError):
    """The database file is not a usable Workbench store."""


class EndpointError(WorkbenchError):
    """The model endpoint cannot be used at all (unreachable, bad key, unknown model)."""


class NotFoundError(WorkbenchError):
    """A run, rollout or other record that the user named does not exist."""


class StreamGone(WorkbenchError):
    """The store a launched run's stream lived in is gone: its launch removed it once the run ended (or the store
    ended with its launch)."""


#: A placeholder followed by another (``{field} {value``): group 1 the first, group 2 the second.
_BEFORE_A_VALUE = re.compile(r"\{(\w+)\}(?= \{(\w+))")


class FieldError(WorkbenchError):
    """An error about an input, as data: the field it fills (``"EvalOptions.rollouts_per_task"``), the value
    given and what is allowed. The message is a template; each face names the fields in it its own way
    through :meth:`render` (the CLI its flag, the app its form field, MCP the tool argument), and ``str()``
    names them as the domain does (the field's own name). Raised as one of its kinds below."""

    def __init__(self, field: str, value: Any = None, allowed: str = "",
                 template: str = "{field} must be {allowed}, not {value}", *, names: Mapping[str, str] | None = None,
                 **values: Any) -> None:
        self.field, self.value, self.allowed, self.template = field, value, allowed, template
        self.names = dict(names or {})  # the other fields the template names: {placeholder: field}
        self.values = values  # the other values the template shows: {placeholder: value}
        super().__init__(self.render(field_name))

    def render(self, name_of: Callable[[str], str], typed: Callable[[str], str] | None = None) -> str:
        """The message with every field it names said by ``name_of`` (a face's word for a field); a field
        followed by one of the values (``{field} {value}``) by ``typed`` where given: as it is typed before a
        value (the CLI's ``-m NAME``, where ``name_of`` says ``-m/--model``)."""
        fields = {"field": self.field, **self.names}
        words = {key: name_of(f) for key, f in fields.items()}
        template = self.template
        if typed is not None:
            words.update({f"{key}__typed": typed(f) for key, f in fields.items()})
            template = _BEFORE_A_VALUE.sub(
                lambda m: f"{{{m[1]}__typed}}" if m[1] in fields and m[2] not in fields else m[0], template)
        return template.format(value=self.value, allowed=self.allowed, **words, **self.values)

    def framed(self, before: str, after: str, *, names: Mapping[str, str] | None = None, **values: Any) -> FieldError:
        """This error with words around its message (templates, with ``names`` and ``values`` for their
        placeholders)."""
        self.template = before + self.template + after
        self.names.update(names or {})
        self.values.update(values)
        self.args = (self.render(field_name),)
        return self

    def fields(self) -> list[str]:
        """Every field the message names, its own first."""
        return [self.field, *self.names.values()]

    def __reduce__(self) -> Any:  # pickled (a worker process's error) with its data, not its message alone
        return _rebuild, (type(self), self.__dict__)


class OptionError(FieldError, ConfigError):
    """An option out of its range (``-n 0``, a temperature of 9)."""


#: An :class:`OptionError`'s template for a task index past the end of the task set (values ``env``, ``n``, ``last``).
TASK_OUT_OF_RANGE = "environment {env!r} has {n} tasks (0..{last}); {field} {value} is out of range"


class StoreFieldError(FieldError, StoreError):
    """The store named by a field (the ``--db`` path) is not a usable store."""


class EndpointFieldError(FieldError, EndpointError):
    """The model endpoint the fields name cannot be used."""


def _rebuild(cls: type[FieldError], state: dict[str, Any]) -> FieldError:
    error = cls.__new__(cls)
    error.__dict__.update(state)
    error.args = (error.render(field_name),)
    return error


def field_name(field: str) -> str:
    """A field's own name: ``"EvalOptions.rollouts_per_task"`` → ``"rollouts_per_task"``."""
    return field.rpartition(".")[2]


def named(error: BaseException, name_of: Callable[[str], str]) -> str:
    """``str(error)``, with the fields a :class:`FieldError` names said by ``name_of``."""
    return error.render(name_of) if isinstance(error, FieldError) else str(error)


def nearest(name: str, valid: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest valid name, or ``""``: the hint an error about an unknown name gives."""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""
