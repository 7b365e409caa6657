"""A Griffe extension for the API pages: the package's docstrings in mkdocstrings' Markdown.

The docstrings follow the Keras convention: an "Example:" section of doctest lines, which
Google style as Griffe parses it names "Examples:" (otherwise the doctest lines would render
as Markdown text), and Sphinx roles (``:func:`~keras_fourier.x.f```), which become links to
the object's API entry where a page renders it, else its name in code.
"""

import re

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:$", re.MULTILINE)
_ROLE = re.compile(r":(?:func|mod|class|data|meth|attr|obj|exc):`(~?)([\w.]+)`")


def _reference(match: re.Match) -> str:
    short, identifier = match.groups()
    label = identifier.rsplit(".", 1)[-1] if short else identifier
    return f'<autoref identifier="{identifier}" optional><code>{label}</code></autoref>'


class KerasDocstrings(griffe.Extension):
    """Rewrites each docstring's "Example:" heading and Sphinx roles when it is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
            obj.docstring.value = _ROLE.sub(_reference, value)
