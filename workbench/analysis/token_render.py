"""A :class:`~workbench.analysis.token_report.TokenReport` drawn as rich text: the same picture in the
app's token view and in ``workbench show ROLLOUT --tokens``."""

from __future__ import annotations

from rich.text import Text

from workbench.analysis.token_report import BANDS, TokenReport, logprob_band

#: One style per logprob band of :data:`workbench.analysis.token_report.BANDS`, most likely first.
BAND_STYLES = ["black on green3", "black on dark_olive_green2", "black on yellow2", "black on dark_orange",
               "bold white on red3"]
PROMPT_STYLE = "dim"
MARK_STYLE = "bold white on magenta"


#: The bands' labels where the full legend does not fit on one line (the same order as BAND_STYLES).
SHORT_BANDS = ["≥.9", "≥.5", "≥.1", "≥.01", "<.01"]


def legend(short: bool = False) -> Text:
    """What each colour means: on one line, or (``short``) in two short lines for a narrow view, where the
    full one would wrap inside its labels."""
    out = Text("sampled p: " if short else "logprob of sampled tokens: ", style="bold")
    labels = SHORT_BANDS if short else [label for _, label in BANDS]
    for label, style in zip(labels, BAND_STYLES, strict=True):
        out.append(f" {label} ", style=style)
        if not short:
            out.append(" ")
    out.append("\n" if short else " ")
    out.append("prompt/template", style=PROMPT_STYLE)
    out.append("  " if short else "   ")
    out.append("⚠ mismatch", style=MARK_STYLE)
    return out


def _visible(piece: str) -> str:
    """Newlines and tabs shown as glyphs, so a whitespace token is never invisible."""
    return piece.replace("\t", "⇥").replace("\n", "↵\n")


def render_report(report: TokenReport) -> Text:
    out = Text()
    for note in report.notes:
        out.append(f"note: {note}\n", style="italic yellow")
    for nt in report.nodes:
        n = nt.node
        what = "sampled" if nt.sampled else "prompt / env"
        head = f"── call {n.call} · {what} · {len(nt.pieces)} tokens"
        if n.policy_version is not None and nt.sampled:
            head += f" · policy {n.policy_version}"
        if nt.marks:
            head += f" · ⚠ {len(nt.marks)} mismatch"
        out.append(head + "\n", style="bold")
        for i, piece in enumerate(nt.pieces):
            text = _visible(piece) if report.decoded else piece + " "
            if i in nt.marks:
                out.append("⚠", style=MARK_STYLE)
                out.append(text, style=MARK_STYLE + " underline")
            elif not nt.sampled:
                out.append(text, style=PROMPT_STYLE)
            elif nt.logprobs is not None:
                # Neighbouring tokens of the same band would merge: every other one is underlined.
                style = BAND_STYLES[logprob_band(nt.logprobs[i])] + (" underline" if i % 2 else "")
                out.append(text, style=style)
            else:
                out.append(text, style="bold" if i % 2 else "")
        if not out.plain.endswith("\n"):
            out.append("\n")
    if report.mismatches:
        out.append("\n")
        for line in report.mismatches:
            out.append("⚠ ", style=MARK_STYLE)
            out.append(line + "\n", style="red")
    elif report.decoded:
        out.append("\nno mismatch: every prompt re-renders to the recorded tokens\n", style="green")
    out.rstrip()
    return out
