"""What differs between the Python versions traceview supports (3.10 and newer), in one place."""

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI (pyproject.toml pins it there)
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["tomllib"]
