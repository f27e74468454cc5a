"""Stand-in for torchvision (see ../README.md): what SGLang's text paths touch at import time."""
from . import transforms

__all__ = ["transforms"]

__version__ = "0.28.0"  # parsed by transformers' version checks
