"""REST client for keras_fourier models served by TF Serving (standard library only).

Builds TF Serving ``:predict`` requests in the row ("instances") format and
prints the top classes. Encoded images go to the ``serving_bytes`` signature
as ``{"b64": ...}`` objects, which TF Serving decodes to the bytes of the
``image_bytes`` string input; arrays (0-255 RGB images, or FNet token ids)
go to ``serving_default`` as nested lists. With ``--signature
serving_default`` the client decodes the images itself (Pillow), resizes the
shorter side to size / 0.875 and centre-crops as the bytes signature does,
and sends float pixels; ``.npy`` files (H, W, 3) in 0-255 are sent as they
are. The input size comes from the served model's metadata, or
``--image-size`` when the model accepts any size.

Classes are printed as ``index name: probability``: names from ``--labels``
(a text file, one name per line), or the ImageNet-1k names for a
1000-class model when the keras_fourier package is installed. When TF Serving
refuses a request (HTTP 400, say a wrong input size or signature), its error
text is printed and the exit status is 1.

Usage::

    python export/rest_client.py --model gfnet_tiny digit.png
    python export/rest_client.py --model gfnet_ti --signature serving_default cat.jpg dog.png
    python export/rest_client.py --server http://localhost:8501 --model gfnet_ti --top-k 3 cat.jpg
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from typing import Any

DEFAULT_SIGNATURE = "serving_default"
BYTES_SIGNATURE = "serving_bytes"
CROP_PCT = 0.875
IMAGENET_CLASSES = 1000


class ServingError(RuntimeError):
    """TF Serving answered with an error status; the message is its error text."""


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


def load_pixels(path: str, height: int, width: int, crop_pct: float = CROP_PCT) -> list:
    """One image as (height, width, 3) nested lists of 0-255 floats, for ``serving_default``.

    A ``.npy`` file holds the array itself. Any other file is decoded with
    Pillow (``pip install pillow``), converted to RGB, resized (bilinear) so
    that its shorter side is size / crop_pct, and centre-cropped, like the
    bytes signature's in-graph transform (to within resampling differences).

    Args:
        path: an image file (JPEG, PNG, ...) or a ``.npy`` file.
        height: the model's input height.
        width: the model's input width.
        crop_pct: centre-crop fraction. Default 0.875.

    Returns:
        Nested lists of floats.

    Example:
        >>> len(load_pixels("cat.jpg", 224, 224))  # doctest: +SKIP
        224
    """
    if path.endswith(".npy"):
        import numpy as np

        return np.load(path).astype("float32").tolist()
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError(
            "--signature serving_default decodes images with Pillow: pip install pillow "
            "(or send .npy arrays, or use --signature serving_bytes)"
        ) from error
    with Image.open(path) as image:
        image = image.convert("RGB")
        scale = max(height, width) / crop_pct / min(image.size)
        resized = image.resize(
            (max(width, round(image.width * scale)), max(height, round(image.height * scale))),
            Image.BILINEAR,
        )
    left, top = (resized.width - width) // 2, (resized.height - height) // 2
    cropped = resized.crop((left, top, left + width, top + height))
    return [
        [list(map(float, cropped.getpixel((column, row)))) for column in range(width)]
        for row in range(height)
    ]


def input_size(metadata: dict[str, Any], signature: str = DEFAULT_SIGNATURE) -> tuple[int, int]:
    """The (height, width) of a served image signature, from its REST metadata.

    Args:
        metadata: the JSON of ``GET /v1/models/NAME/metadata``.
        signature: the signature. Default "serving_default".

    Returns:
        (height, width).

    Raises:
        ValueError: when the signature takes any size (pass --image-size).

    Example:
        >>> metadata = get_json(metadata_url("http://localhost:8501", "gfnet_ti"))
        >>> input_size(metadata)  # doctest: +SKIP
        (224, 224)
    """
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    (tensor,) = signatures[signature]["inputs"].values()
    dims = [int(dim["size"]) for dim in tensor["tensor_shape"]["dim"]]
    if len(dims) != 4 or min(dims[1:3]) < 1:
        raise ValueError(
            f"Signature {signature!r} takes images of any size {dims}; pass --image-size."
        )
    return dims[1], dims[2]


def class_names(num_classes: int, labels: str | None = None) -> list[str] | None:
    """Names of the classes: from a labels file, else ImageNet's for 1000 classes.

    Args:
        num_classes: length of a prediction.
        labels: a text file with one class name per line. Default None.

    Returns:
        The names, or None when there are none (classes are then printed by index).

    Example:
        >>> class_names(10) is None
        True
    """
    if labels is not None:
        with open(labels, encoding="utf-8") as file:
            names = [line.strip() for line in file if line.strip()]
        if len(names) != num_classes:
            raise ValueError(
                f"--labels {labels!r} names {len(names)} classes; the model has {num_classes}."
            )
        return names
    if num_classes == IMAGENET_CLASSES:
        try:
            from keras_fourier.imagenet import class_index
        except ImportError:
            return None
        return [name for _, name in class_index()]
    return None


def metadata_url(server: str, model: str, version: int | None = None) -> str:
    """The REST metadata URL of a served model (signatures, input shapes).

    Example:
        >>> metadata_url("http://localhost:8501", "gfnet_ti")
        'http://localhost:8501/v1/models/gfnet_ti/metadata'
    """
    return predict_url(server, model, version).removesuffix(":predict") + "/metadata"


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
        ServingError: when TF Serving answers with an error status (the
            message holds the status and TF Serving's error text), or when no
            server answers.

    Example:
        >>> predict(predict_url("http://localhost:8501", "gfnet_ti"), request)["predictions"]
    """
    data = json.dumps(request).encode("utf-8")
    return get_json(
        urllib.request.Request(
            url, data=data, headers={"Content-Type": "application/json"}, method="POST"
        ),
        timeout,
    )


def get_json(request: urllib.request.Request | str, timeout: float = 60.0) -> dict[str, Any]:
    """Sends a request (a URL: GET) and decodes the JSON answer.

    Args:
        request: a `urllib.request.Request` or a URL.
        timeout: seconds to wait. Default 60.

    Returns:
        The decoded JSON.

    Raises:
        ServingError: for an error status, with TF Serving's error text, or
            when no server answers (connection refused, unknown host, timeout).

    Example:
        >>> get_json("http://localhost:8501/v1/models/gfnet_ti")  # doctest: +SKIP
        {'model_version_status': [{'version': '1', 'state': 'AVAILABLE', ...}]}
    """
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as error:
        body = error.read().decode("utf-8", errors="replace")
        try:
            text = json.loads(body)["error"]
        except (ValueError, KeyError, TypeError):
            text = body.strip() or "(no error text)"
        raise ServingError(f"TF Serving answered {error.code} {error.reason}: {text}") from None
    except (urllib.error.URLError, OSError) as error:
        url = request.full_url if isinstance(request, urllib.request.Request) else request
        reason = getattr(error, "reason", error)
        raise ServingError(
            f"no answer from {url} ({reason}): is TF Serving running there? Start it as "
            "export/README.md shows, or pass --server"
        ) from None


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
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, GIF, BMP), or .npy")
    parser.add_argument(
        "--server", default="http://localhost:8501", help="REST API address (default: %(default)s)"
    )
    parser.add_argument("--model", required=True, help="model name in models.config")
    parser.add_argument("--version", type=int, default=None, help="default: the latest")
    parser.add_argument(
        "--signature",
        choices=(BYTES_SIGNATURE, DEFAULT_SIGNATURE),
        default=BYTES_SIGNATURE,
        help="serving_bytes: send the encoded files; serving_default: send float pixels "
        "decoded here (default: %(default)s)",
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="serving_default: input size for models that take any size (default: from the "
        "model's metadata)",
    )
    parser.add_argument(
        "--labels",
        default=None,
        help="text file of class names, one per line (default: "
        "ImageNet names for 1000 classes when keras_fourier is installed, else indices)",
    )
    parser.add_argument("--top-k", type=int, default=5, help="classes shown (default: 5)")
    args = parser.parse_args(argv)

    try:
        if args.signature == BYTES_SIGNATURE:
            request = image_files_request(args.images)
        else:
            if args.image_size:
                height = width = args.image_size
            else:
                metadata = get_json(metadata_url(args.server, args.model, args.version))
                height, width = input_size(metadata)
            request = build_predict_request(
                [load_pixels(path, height, width) for path in args.images], DEFAULT_SIGNATURE
            )
        response = predict(predict_url(args.server, args.model, args.version), request)
    except (ServingError, ValueError) as error:
        print(f"rest_client: error: {error}", file=sys.stderr)
        return 1
    names = None
    for path, row in zip(args.images, response["predictions"], strict=True):
        scores = next(iter(row.values())) if isinstance(row, dict) else row
        names = names or class_names(len(scores), args.labels)
        best = ", ".join(
            f"{index} {names[index]}: {score:.4f}" if names else f"{index}: {score:.4f}"
            for index, score in top_k(scores, args.top_k)
        )
        print(f"{path}: {best}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
