"""The product's own check as a rubric, for `workbench tasks from-traffic --rubric counts_on.py`: a reply is right
when its number is the one after the number asked about."""

import re

import workbench as wb

rubric = wb.Rubric()


@rubric.reward
def counts_on(prompt: list, completion: str) -> float:
    """1 when the reply's last number is the one after the number in the last user turn, else 0."""
    asked = re.findall(r"-?\d+", prompt[-1]["content"])[-1]
    said = re.findall(r"-?\d+", completion)
    return float(said[-1:] == [str(int(asked) + 1)])
