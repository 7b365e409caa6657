"""gRPC client for keras_fourier models served by TF Serving (optional).

Sends encoded image files to the ``serving_bytes`` signature over gRPC
(port 8500) and prints the top classes. Needs the ``tensorflow-serving-api``
package, which is not a dependency of keras_fourier::

    pip install tensorflow-serving-api
    python export/grpc_client.py --model gfnet_ti cat.jpg dog.png
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

BYTES_SIGNATURE = "serving_bytes"
BYTES_INPUT = "image_bytes"
MISSING_PACKAGE = (
    "The gRPC client needs the optional `tensorflow-serving-api` package (not a dependency "
    "of keras_fourier): pip install tensorflow-serving-api. The REST client, "
    "export/rest_client.py, needs only the standard library."
)


def serving_apis() -> tuple[ModuleType, ModuleType, ModuleType, ModuleType]:
    """Imports the optional gRPC dependencies.

    Returns:
        The modules (grpc, tensorflow, predict_pb2, prediction_service_pb2_grpc).

    Raises:
        ImportError: with installation instructions if `tensorflow-serving-api`
            is missing.
    """
    try:
        import grpc
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
    except ImportError as error:
        raise ImportError(MISSING_PACKAGE) from error
    return grpc, tf, predict_pb2, prediction_service_pb2_grpc


def build_request(model: str, images: Sequence[bytes], version: int | None = None):
    """A ``PredictRequest`` of encoded images for the ``serving_bytes`` signature.

    Args:
        model: model name in models.config.
        images: encoded image files (JPEG, PNG, GIF, BMP).
        version: model version. Default None: the latest.

    Returns:
        A `tensorflow_serving.apis.predict_pb2.PredictRequest`.

    Raises:
        ImportError: if `tensorflow-serving-api` is missing.

    Example:
        >>> build_request("gfnet_ti", [open("cat.jpg", "rb").read()]).model_spec.name
        'gfnet_ti'
    """
    _, tf, predict_pb2, _ = serving_apis()
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = BYTES_SIGNATURE
    if version is not None:
        request.model_spec.version.value = version
    request.inputs[BYTES_INPUT].CopyFrom(
        tf.make_tensor_proto(list(images), dtype=tf.string, shape=[len(images)])
    )
    return request


def main(argv: Sequence[str] | None = None) -> int:
    """Classifies image files with a served model over gRPC and prints the top classes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, GIF, BMP)")
    parser.add_argument("--server", default="localhost:8500", help="gRPC address")
    parser.add_argument("--model", required=True, help="model name in models.config")
    parser.add_argument("--version", type=int, default=None, help="default: the latest")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)

    try:
        grpc, tf, _, prediction_service_pb2_grpc = serving_apis()
    except ImportError as error:
        print(error, file=sys.stderr)
        return 1
    images = []
    for path in args.images:
        with open(path, "rb") as file:
            images.append(file.read())
    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(args.server))
    response = stub.Predict(build_request(args.model, images, args.version), args.timeout)
    (scores,) = (tf.make_ndarray(tensor) for tensor in response.outputs.values())
    for path, row in zip(args.images, scores, strict=True):
        best = row.argsort()[::-1][: args.top_k]
        print(f"{path}: " + ", ".join(f"{index}: {row[index]:.4f}" for index in best))
    return 0


if __name__ == "__main__":
    sys.exit(main())
