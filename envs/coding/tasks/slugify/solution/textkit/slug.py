"""URL slugs."""


def slugify(text: str) -> str:
    """Lowercase ``text`` and join its runs of letters and digits with single dashes."""
    out = []
    for ch in text.lower():
        if ch.isalnum():
            out.append(ch)
        elif out and out[-1] != "-":
            out.append("-")
    return "".join(out).strip("-")
