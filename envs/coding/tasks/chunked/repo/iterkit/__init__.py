from .chunks import chunked

__all__ = ["chunked"]
