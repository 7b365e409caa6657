"""The TF Serving model config (``models.config``) of an export folder.

`keras-fourier export --format saved_model --out DIR` writes DIR/NAME/VERSION/
and then DIR/models.config. A new config has one entry per model folder of
DIR, so that every exported model, named as its folder, is served without
editing the config. An existing config is merged, never replaced: an entry
for NAME is added if it has none, and everything else (other models, their
version policies and labels, comments) is kept byte for byte; a config that
does not parse as a text-format ``ModelServerConfig`` with a
``model_config_list`` is refused, naming the file. Paths are those of the
Docker container of export/README.md (DIR mounted at /models).
"""

from __future__ import annotations

import os
import re

from keras_fourier.fileio import atomic_write_text

CONFIG_FILE = "models.config"
CONTAINER_ROOT = "/models"

_ENTRY = """  config {{
    name: "{name}"
    base_path: "{base_path}"
    model_platform: "tensorflow"
    model_version_policy {{
      latest {{
        num_versions: 1
      }}
    }}
  }}
"""


def served_models(out: str | os.PathLike) -> list[str]:
    """Names of the model folders of `out`: those holding a numbered SavedModel version.

    Args:
        out: the export folder.

    Returns:
        Sorted folder names.

    Example:
        >>> served_models("models")  # doctest: +SKIP
        ['gfnet_tiny']
    """
    names = []
    for entry in sorted(os.scandir(out), key=lambda entry: entry.name):
        if entry.is_dir() and not entry.name.startswith("."):
            versions = [
                version
                for version in os.scandir(entry.path)
                if version.is_dir()
                and version.name.isdigit()
                and os.path.exists(os.path.join(version.path, "saved_model.pb"))
            ]
            if versions:
                names.append(entry.name)
    return names


def models_config(names: list[str], root: str = CONTAINER_ROOT) -> str:
    """The text proto of a TF Serving model config listing `names`.

    Args:
        names: model names; each is served from ``root/name``.
        root: where the export folder is mounted in the server. Default "/models".

    Returns:
        The config text.

    Example:
        >>> print(models_config(["gfnet_tiny"]).splitlines()[3])
            name: "gfnet_tiny"
    """
    entries = "".join(
        _ENTRY.format(name=name, base_path=f"{root.rstrip('/')}/{name}") for name in names
    )
    return (
        "# TF Serving model config written by keras-fourier export: one entry per model folder\n"
        f"# of this export folder, served from {root} (the folder mounted there).\n"
        f"model_config_list {{\n{entries}}}\n"
    )


def write_models_config(out: str | os.PathLike) -> tuple[str, list[str]]:
    """Writes ``out/models.config`` (atomically) listing every model folder of `out`.

    Args:
        out: the export folder.

    Returns:
        (the config's path, the model names it lists).

    Example:
        >>> write_models_config("models")  # doctest: +SKIP
        ('models/models.config', ['gfnet_tiny'])
    """
    names = served_models(out)
    path = os.path.join(os.fspath(out), CONFIG_FILE)
    atomic_write_text(path, models_config(names))
    return path, names


_TOKEN = re.compile(
    r"""\s+|\#[^\n]*|(?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')"""
    r"|(?P<word>[-+.\w]+)|(?P<punct>[{}<>:\[\],;])"
)


def _tokens(text: str, path: str) -> list[tuple[str, str, int]]:
    """(kind, text, offset) of each token of a text-format protobuf."""
    tokens, offset = [], 0
    while offset < len(text):
        match = _TOKEN.match(text, offset)
        if match is None:
            raise ValueError(
                f"{path!r} does not parse as a TF Serving model config: "
                f"unexpected {text[offset : offset + 20]!r} at offset {offset}."
            )
        if match.lastgroup is not None:
            tokens.append((match.lastgroup, match.group(), offset))
        offset = match.end()
    return tokens


class _Parser:
    """A schema-free reader of text-format protobuf messages, keeping each field's span."""

    def __init__(self, text: str, path: str):
        self.path = path
        self.tokens = _tokens(text, path)
        self.index = 0

    def error(self, expected: str):
        where = self.tokens[self.index][2] if self.index < len(self.tokens) else "the end"
        return ValueError(
            f"{self.path!r} does not parse as a TF Serving model config: expected {expected} "
            f"at offset {where}. Fix or move it; nothing was written."
        )

    def peek(self) -> str | None:
        return self.tokens[self.index][1] if self.index < len(self.tokens) else None

    def take(self, kind: str | None = None, text: str | None = None) -> tuple[str, str, int]:
        token = self.tokens[self.index] if self.index < len(self.tokens) else None
        if token is None or (kind and token[0] != kind) or (text and token[1] != text):
            raise self.error(text or kind or "a token")
        self.index += 1
        return token

    def message(self, close: str | None) -> list[tuple[str, object, int, int]]:
        """Fields (name, value, start offset, end token index) until `close`."""
        fields = []
        while self.peek() != close:
            if close is not None and self.peek() is None:
                raise self.error(repr(close))
            _, name, start = self.take("word")
            if self.peek() == ":":
                self.take()
            value = self.value()
            end = self.index
            if self.peek() in (",", ";"):
                self.take()
            fields.append((name, value, start, end))
        return fields

    def value(self):
        token = self.peek()
        if token in ("{", "<"):
            self.take()
            fields = self.message("}" if token == "{" else ">")
            closing = self.take()
            return {"fields": fields, "close": closing[2]}
        if token == "[":
            self.take()
            values = []
            while self.peek() != "]":
                values.append(self.value())
                if self.peek() == ",":
                    self.take()
            self.take()
            return values
        kind, text, _ = self.take()
        if kind == "punct":
            self.index -= 1
            raise self.error("a value")
        if kind == "string":
            while self.index < len(self.tokens) and self.tokens[self.index][0] == "string":
                text += self.take()[1]
        return text


def _unquote(text: object) -> object:
    if isinstance(text, str) and text[:1] in "\"'":
        return re.sub(r"[\"']([^\"']*)[\"']", r"\1", text)
    return text


def read_models_config(path: str | os.PathLike) -> tuple[str, int | None, list[str]]:
    """Reads a TF Serving model config: (its text, where its list closes, its model names).

    Args:
        path: the ``models.config`` file.

    Returns:
        The text; the offset of the closing brace of ``model_config_list``
        (None for a file with no fields, comments only); the ``name`` of
        each ``config`` entry.

    Raises:
        ValueError: the file does not parse, or holds other fields than one
            ``model_config_list``; the message names the file.

    Example:
        >>> read_models_config("models/models.config")[2]  # doctest: +SKIP
        ['gfnet_tiny', 'resnet']
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"Cannot read the TF Serving model config {path!r}: {error}") from None
    parser = _Parser(text, path)
    fields = parser.message(None)
    if not fields:
        return text, None, []
    if [name for name, *_ in fields] != ["model_config_list"] or not isinstance(fields[0][1], dict):
        raise ValueError(
            f"{path!r} is not a TF Serving model config with one model_config_list "
            f"(fields: {[name for name, *_ in fields]}); fix or move it. Nothing was written."
        )
    entries = fields[0][1]
    names = []
    for name, value, *_ in entries["fields"]:
        if name != "config" or not isinstance(value, dict):
            raise ValueError(f"{path!r}: model_config_list holds {name!r}, not config entries.")
        names.extend(str(_unquote(v)) for key, v, *_ in value["fields"] if key == "name")
    return text, entries["close"], names


def merge_models_config(out: str | os.PathLike, name: str) -> tuple[str, list[str]]:
    """Adds model `name` to ``out/models.config`` (atomically), keeping everything else.

    Without a config (or with one of comments only), writes one listing
    every model folder of `out` (:func:`write_models_config`). An existing
    entry named `name` is kept as it is (its version policy and labels are
    the user's).

    Args:
        out: the export folder.
        name: the exported model, served from ``/models/<name>``.

    Returns:
        (the config's path, the model names it lists).

    Raises:
        ValueError: the existing config does not parse (naming the file);
            nothing is written.

    Example:
        >>> merge_models_config("models", "gfnet_tiny")  # doctest: +SKIP
        ('models/models.config', ['resnet', 'gfnet_tiny'])
    """
    path = os.path.join(os.fspath(out), CONFIG_FILE)
    if not os.path.exists(path):
        return write_models_config(out)
    text, close, names = read_models_config(path)
    if close is None:
        return write_models_config(out)
    if name not in names:
        entry = _ENTRY.format(name=name, base_path=f"{CONTAINER_ROOT}/{name}")
        head = text[:close]
        if not head.endswith("\n"):
            entry = "\n" + entry
        atomic_write_text(path, head + entry + text[close:])
        names.append(name)
    return path, names
