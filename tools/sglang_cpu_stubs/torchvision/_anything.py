"""An object every attribute and call of which is another such object (import-time references only)."""


class Anything:
    def __getattr__(self, name):
        return Anything()

    def __call__(self, *args, **kwargs):
        return Anything()
