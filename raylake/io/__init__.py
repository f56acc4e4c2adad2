"""File access over fsspec."""

from raylake.io.credentials import StorageOptions
from raylake.io.fileio import FileIO, absolute_uri

__all__ = ["FileIO", "StorageOptions", "absolute_uri"]
