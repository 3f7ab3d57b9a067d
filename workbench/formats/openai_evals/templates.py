"""OpenAI Evals' ``{{ namespace.variable }}`` templates: read, checked against what exists, and rendered.

A tag names a namespace (``item``: the data row's item; ``sample``: the model's output) and a path into it,
with dots for keys and ``[N]`` for list positions (``{{ sample.output_tools[0].function.name }}``). A tag
renders as the text it names, and any other value as JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from workbench.formats.openai_evals.errors import EvalDefinitionError

#: What the ``sample`` namespace holds (the graders guide's list).
SAMPLE_FIELDS = ("output_text", "output_json", "output_tools", "choices", "output_audio")

_TAG = re.compile(r"\{\{(.*?)\}\}", re.S)
_STEP = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]|\[\"([^\"]*)\"\]|\['([^']*)'\]")


class MissingValue(LookupError):
    """A tag names a value the item or sample does not have (the grade is then invalid: 0)."""


@dataclass(frozen=True, slots=True)
class Ref:
    """One tag: its namespace, its path of keys and positions, and the text it was written as."""

    namespace: str
    path: tuple[str | int, ...]
    text: str


def parse_ref(inner: str, where: str) -> Ref:
    text = " ".join(inner.split())  # one line, whatever the template held
    steps: list[str | int] = []
    pos = 0
    while pos < len(text):
        m = _STEP.match(text, pos)
        if m is None or m.end() == pos or (pos == 0 and text.startswith(".")):
            raise EvalDefinitionError(f"{where}: {{{{ {text} }}}} is not a namespace.variable tag "
                                      "(item.* or sample.*)")
        key = m.group(1) or m.group(3) or m.group(4)
        steps.append(int(m.group(2)) if m.group(2) is not None else str(key))
        pos = m.end()
    if len(steps) < 2 or steps[0] not in ("item", "sample") or not isinstance(steps[1], str):
        raise EvalDefinitionError(f"{where}: {{{{ {text} }}}} is not a namespace.variable tag (the namespaces "
                                  "are item and sample)")
    return Ref(str(steps[0]), tuple(steps[1:]), text)


def refs(template: str, where: str) -> list[Ref]:
    """Every tag of ``template``; a tag that is not ``item.*`` or ``sample.*`` is refused naming ``where``."""
    return [parse_ref(m.group(1), where) for m in _TAG.finditer(template)]


def check(template: str, where: str, *, item_fields: Iterable[str], sample: bool, output_json: bool) -> None:
    """Refuse a tag whose variable cannot exist: an item field no row has, a ``sample`` variable where there
    is no sample yet (a prompt), a sample variable the guide does not list, ``output_json`` without the
    run's ``response_format``."""
    fields = set(item_fields)
    for ref in refs(template, where):
        name = ref.path[0]
        if ref.namespace == "item" and name not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise EvalDefinitionError(f"{where}: {{{{ {ref.text} }}}} names no field of the items (fields: {known})")
        if ref.namespace == "sample":
            if not sample:
                raise EvalDefinitionError(f"{where}: {{{{ {ref.text} }}}} uses the sample, which a prompt "
                                          "cannot (only item.* is known before the model answers)")
            if name not in SAMPLE_FIELDS:
                raise EvalDefinitionError(f"{where}: {{{{ {ref.text} }}}} is no sample variable (they are "
                                          f"{', '.join(SAMPLE_FIELDS)})")
            if name == "output_json" and not output_json:
                raise EvalDefinitionError(f"{where}: {{{{ {ref.text} }}}} needs the run's "
                                          "sampling_params.response_format (sample.output_json is filled only then)")


def lookup(value: Any, path: tuple[str | int, ...], text: str) -> Any:
    for step in path:
        if isinstance(step, int) and isinstance(value, list) and step < len(value):
            value = value[step]
        elif isinstance(step, str) and isinstance(value, Mapping) and step in value:
            value = value[step]  # noqa: SIM114 - a position and a key index different types
        else:
            raise MissingValue(f"{{{{ {text} }}}} has no value")
    return value


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render(template: str, item: Mapping[str, Any], sample: Mapping[str, Any] | None = None) -> str:
    """``template`` with each tag replaced; a tag whose value is missing raises :class:`MissingValue`."""

    def value(m: re.Match[str]) -> str:
        ref = parse_ref(m.group(1), "template")
        root = item if ref.namespace == "item" else (sample or {})
        return as_text(lookup(root, ref.path, ref.text))

    return _TAG.sub(value, template)
