"""REST client for keras_fourier models served by TF Serving (standard library only).

Builds TF Serving ``:predict`` requests in the row ("instances") format and
prints the top classes. Encoded images go to the ``serving_bytes`` signature
as ``{"b64": ...}`` objects, which TF Serving decodes to the bytes of the
``image_bytes`` string input; arrays (0-255 RGB images, or FNet token ids)
go to ``serving_default`` as nested lists.

Usage::

    python export/rest_client.py --model gfnet_ti cat.jpg dog.png
    python export/rest_client.py --server http://localhost:8501 --model gfnet_ti --top-k 3 cat.jpg
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.request
from collections.abc import Iterable, Sequence
from typing import Any

DEFAULT_SIGNATURE = "serving_default"
BYTES_SIGNATURE = "serving_bytes"


def encode_value(value: Any) -> Any:
    """The JSON form of one input value: bytes as ``{"b64": ...}``, arrays as lists.

    Args:
        value: bytes, an object with ``tolist()`` (NumPy arrays), a dict of
            values (one instance of a multi-input signature), a list, or a
            JSON scalar.

    Returns:
        A JSON-serialisable value.

    Example:
        >>> encode_value(b"\\x89PNG")
        {'b64': 'iVBORw=='}
    """
    if isinstance(value, (bytes, bytearray)):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {name: encode_value(item) for name, item in value.items()}
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [encode_value(item) for item in value]
    return value


def build_predict_request(
    instances: Iterable[Any], signature_name: str = DEFAULT_SIGNATURE
) -> dict[str, Any]:
    """The JSON body of a TF Serving ``:predict`` request in the row format.

    Args:
        instances: one entry per example: the value of the single input
            (an image array, or encoded image bytes), or a dict
            {input name: value} for several inputs (FNet's ``token_ids``,
            ``segment_ids``, ``padding_mask``).
        signature_name: the signature to run. Default "serving_default".

    Returns:
        ``{"signature_name": ..., "instances": [...]}``.

    Example:
        >>> build_predict_request([b"abc"], "serving_bytes")
        {'signature_name': 'serving_bytes', 'instances': [{'b64': 'YWJj'}]}
    """
    return {
        "signature_name": signature_name,
        "instances": [encode_value(instance) for instance in instances],
    }


def image_files_request(paths: Iterable[str]) -> dict[str, Any]:
    """A ``serving_bytes`` request with the encoded bytes of image files (JPEG, PNG, ...).

    Args:
        paths: image file paths.

    Returns:
        The request body, see :func:`build_predict_request`.

    Example:
        >>> image_files_request(["cat.jpg"])["signature_name"]
        'serving_bytes'
    """
    images = []
    for path in paths:
        with open(path, "rb") as file:
            images.append(file.read())
    return build_predict_request(images, BYTES_SIGNATURE)


def predict_url(server: str, model: str, version: int | None = None) -> str:
    """The REST ``:predict`` URL of a served model.

    Args:
        server: REST API address, e.g. "http://localhost:8501".
        model: model name in models.config.
        version: model version. Default None: the latest.

    Returns:
        ``{server}/v1/models/{model}[/versions/{version}]:predict``.

    Example:
        >>> predict_url("http://localhost:8501", "gfnet_ti")
        'http://localhost:8501/v1/models/gfnet_ti:predict'
    """
    version_part = "" if version is None else f"/versions/{version}"
    return f"{server.rstrip('/')}/v1/models/{model}{version_part}:predict"


def predict(url: str, request: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """POSTs `request` as JSON to `url` and returns the decoded JSON response.

    Args:
        url: a ``:predict`` URL, see :func:`predict_url`.
        request: the request body.
        timeout: seconds to wait. Default 60.

    Returns:
        The response, e.g. ``{"predictions": [[0.01, ...], ...]}``.

    Raises:
        urllib.error.URLError: if the server cannot be reached or answers
            with an error status.

    Example:
        >>> predict(predict_url("http://localhost:8501", "gfnet_ti"), request)["predictions"]
    """
    data = json.dumps(request).encode("utf-8")
    http_request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(http_request, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


def top_k(scores: Sequence[float], k: int) -> list[tuple[int, float]]:
    """The `k` highest-scoring classes.

    Args:
        scores: one score per class.
        k: how many to keep.

    Returns:
        (class index, score) pairs, best first.

    Example:
        >>> top_k([0.1, 0.7, 0.2], 2)
        [(1, 0.7), (2, 0.2)]
    """
    ranked = sorted(enumerate(scores), key=lambda pair: pair[1], reverse=True)
    return ranked[:k]


def main(argv: Sequence[str] | None = None) -> int:
    """Classifies image files with a served model and prints the top classes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, GIF, BMP)")
    parser.add_argument("--server", default="http://localhost:8501", help="REST API address")
    parser.add_argument("--model", required=True, help="model name in models.config")
    parser.add_argument("--version", type=int, default=None, help="default: the latest")
    parser.add_argument("--top-k", type=int, default=5)
    args = parser.parse_args(argv)

    url = predict_url(args.server, args.model, args.version)
    response = predict(url, image_files_request(args.images))
    for path, row in zip(args.images, response["predictions"], strict=True):
        scores = next(iter(row.values())) if isinstance(row, dict) else row
        best = ", ".join(f"{index}: {score:.4f}" for index, score in top_k(scores, args.top_k))
        print(f"{path}: {best}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
