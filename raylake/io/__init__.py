"""File access over fsspec."""

from raylake.io.credentials import StorageOptions
from raylake.io.fileio import FileIO

__all__ = ["FileIO", "StorageOptions"]
