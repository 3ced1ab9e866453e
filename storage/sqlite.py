"""SqliteStore: being written (issue 2)."""

__all__ = ["SqliteStore"]


class SqliteStore:  # replaced by the real store in the storage work
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("SqliteStore is not written yet")
