"""Roman numerals."""

VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def roman_to_int(text: str) -> int:
    """The value of a Roman numeral such as "MCMXCIV"."""
    text = text.strip().upper()
    if not text or any(ch not in VALUES for ch in text):
        raise ValueError(f"not a Roman numeral: {text!r}")
    return sum(VALUES[ch] for ch in text)
