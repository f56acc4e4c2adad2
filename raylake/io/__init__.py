"""File access over fsspec."""

from raylake.io.fileio import FileIO, absolute_uri

__all__ = ["FileIO", "absolute_uri"]
