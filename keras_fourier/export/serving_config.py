"""The TF Serving model config (``models.config``) of an export folder.

`keras-fourier export --format saved_model --out DIR` writes DIR/NAME/VERSION/
and then DIR/models.config, with one entry per model folder of DIR, so that
every exported model, named as its folder, is served without editing the
config. Paths are those of the Docker container of export/README.md (DIR
mounted at /models).
"""

from __future__ import annotations

import os

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
