def __getattr__(name):
    def unavailable(*args, **kwargs):
        raise NotImplementedError(f"torchvision stand-in: {name} (image processing is not available here)")
    return unavailable
