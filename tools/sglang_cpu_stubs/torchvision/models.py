from ._anything import Anything


def __getattr__(name):
    return Anything()
