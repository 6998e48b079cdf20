"""The repository root is the ``fetchlat`` package's own folder: pyproject.toml maps each folder
below it to ``fetchlat.<folder>`` (``proxy/`` is ``fetchlat.proxy``), and the packages import
one another relatively (``from ..protocol import framing`` in ``proxy/``), so the imports read
the same as files and as modules. This file marks that for tools that read paths; it is not
installed (``fetchlat`` is a namespace package) and holds nothing. docs/architecture.md draws the
packages and which way they import."""
