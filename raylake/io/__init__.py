"""File access over fsspec."""

from raylake.io.fileio import FileIO

__all__ = ["FileIO"]
