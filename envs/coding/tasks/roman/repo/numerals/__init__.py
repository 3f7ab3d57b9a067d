from .roman import roman_to_int

__all__ = ["roman_to_int"]
