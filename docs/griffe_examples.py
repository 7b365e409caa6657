"""A Griffe extension for the API pages: reads a docstring's "Example:" section as "Examples:".

The package's docstrings follow the Keras convention ("Example:" with doctest lines); Google
style as Griffe parses it names the section "Examples:", and would otherwise render the
doctest lines as Markdown text.
"""

import re

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Renames every docstring's "Example:" section to "Examples:" when the object is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
