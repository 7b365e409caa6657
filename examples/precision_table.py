"""float32, bfloat16 and int8 (Keras and TFLite) side by side: docs/performance.md's table.

For each model (a name of ``--models``, built with seeded random weights and
saved as ``.keras``, and each trained ``.keras`` file of ``--keras``: by
default the main job's ``runs/default/model.keras``, trained first with
``keras-fourier train`` if it is missing), ``keras-fourier export`` writes
its float32 and full-integer int8 TFLite files (int8 calibrated on the train
split of ``--data``), then each of ``--rounds`` rounds runs
``keras-fourier bench`` once per variant, each in its own process, in turn:
float32, bf16 (``mixed_bfloat16``), bf16 with the DFT products in bfloat16
(``--dft-precision bfloat16``), Keras int8 (``model.quantize("int8")``),
TFLite float32 and TFLite int8 (``--threads`` threads). Every variant but
float32 reports its top-1 agreement and max output difference with the
float32 Keras model on ``--examples`` images of the test split of ``--data``
(the same weights); the trained model is the one whose agreement means
something (random weights have near-tied logits). Prints a Markdown table
(median over the rounds, each round's figure in the JSON) headed by the
host's CPU, its ``lscpu`` flags that decide bfloat16 and int8, the date and
the command, and writes OUT/table.md and OUT/results.json. ``--quick`` runs
the same steps on the main job's model trained for 2 epochs in OUT alone (no
named model; batch 4, one round, 16 images; a few minutes on a 2-core CPU)::

    python examples/precision_table.py --quick --out runs/precision_quick

docs/performance.md describes the full-size runs (the defaults) and their
figures. Figures are one machine's at one moment: run on an idle machine,
and compare variants only within one table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys

from keras_fourier.bench.host import CPU_FEATURES, cpu_description
from keras_fourier.fileio import atomic_write_text

VARIANTS = ("float32", "bf16", "bf16 + bf16 DFT", "int8 Keras", "TFLite float32", "TFLite int8")
QUICK = {"models": "", "image_size": 16, "batch_size": 4, "rounds": 1, "examples": 16}
# The main job's model (README's `keras-fourier train`), the trained agreement reference.
MAIN_JOB = os.path.join("runs", "default", "model.keras")


def _label(model: str) -> str:
    """A model name, or FOLDER_STEM of a .keras file (run folders all hold model.keras)."""
    if not model.endswith(".keras"):
        return model
    path = os.path.abspath(model)
    return (
        f"{os.path.basename(os.path.dirname(path))}_{os.path.splitext(os.path.basename(path))[0]}"
    )


def _keras_fourier(*argv: str) -> None:
    """Runs one `keras-fourier` command in a fresh process; raises if it fails."""
    command = [sys.executable, "-m", "keras_fourier.cli", *argv]
    print("$ keras-fourier " + " ".join(argv), flush=True)
    subprocess.run(command, check=True)


def _trained(path: str, args: argparse.Namespace) -> str:
    """`path`, or the main job's model trained into it (into OUT with --quick) if missing."""
    if os.path.exists(path):
        return path
    if path != MAIN_JOB:
        raise SystemExit(f"--keras: no such file. Received: --keras={path}")
    folder = os.path.join(args.out, "main_job") if args.quick else os.path.dirname(path)
    _keras_fourier("train", "--out", folder, *(["--epochs", "2"] if args.quick else []))
    return os.path.join(folder, "model.keras")


def host_header(argv: list[str]) -> str:
    """The CPU, which of its precision flags it has and has not, the date and the command."""
    model, present = cpu_description()
    absent = [flag for flag in CPU_FEATURES if flag not in present]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"Host: {model}, {os.cpu_count()} CPUs; flags: {' '.join(present) or '-'} "
        f"(absent: {' '.join(absent) or '-'}). {date}.\n"
        f"Command: `python examples/precision_table.py {shlex.join(argv)}`"
    )


def _prepare(model: str, args: argparse.Namespace, lite: bool) -> tuple[str, str, str]:
    """The .keras file of `model` and its float32 and int8 TFLite files (exported if `lite`)."""
    folder = os.path.join(args.out, _label(model))
    os.makedirs(folder, exist_ok=True)
    if model.endswith(".keras"):
        keras_file = model
    else:
        import keras

        from keras_fourier.training import create_model

        keras.utils.set_random_seed(0)
        keras_file = os.path.join(folder, "model.keras")
        create_model(model, num_classes=args.classes, image_size=args.image_size).save(keras_file)
    import keras

    name = keras.saving.load_model(keras_file, compile=False).name
    tflite = os.path.join(folder, "tflite")
    if lite:
        _keras_fourier(
            "export", keras_file, "--format", "tflite", "--quantize", "none,int8",
            "--data", args.data, "--num-batches", str(args.calibration_batches),
            "--output", "logits", "--overwrite", "--out", tflite,
        )  # fmt: skip
    return (
        keras_file,
        os.path.join(tflite, f"{name}.tflite"),
        os.path.join(tflite, f"{name}_int8.tflite"),
    )


def _bench(variant: str, files: tuple[str, str, str], out: str, args) -> dict:
    """One `keras-fourier bench` run of a variant; its row of bench.json."""
    keras_file, tflite, tflite_int8 = files
    common = ["--batch-size", str(args.batch_size), "--repeats", str(args.repeats)]
    common += ["--no-train"] if args.no_train else []
    agreement = ["--agreement", "--data", args.data, "--examples", str(args.examples)]
    lite = ["--reference", keras_file, "--threads", str(args.threads), *agreement]
    bf16_dft = ["--dft-precision", "bfloat16"]
    argv = {
        "float32": [keras_file],
        "bf16": [keras_file, "--precision", "bf16", *agreement],
        "bf16 + bf16 DFT": [keras_file, "--precision", "bf16", *bf16_dft, *agreement],
        "int8 Keras": [keras_file, "--precision", "int8", *agreement],
        "TFLite float32": [tflite, *lite],
        "TFLite int8": [tflite_int8, *lite],
    }[variant]
    _keras_fourier("bench", *argv, *common, "--out", out)
    with open(os.path.join(out, "bench.json")) as file:
        report = json.load(file)
    return {**report["rows"][0], "host": report["host"]}


def _median(rounds: list[dict], key: str):
    values = [row[key] for row in rounds if row.get(key) is not None]
    return statistics.median(values) if values else None


def _cell(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.{digits}g}"


def table(results: dict[str, dict[str, list[dict]]]) -> str:
    """The Markdown table of every model and variant (medians over the rounds)."""
    lines = [
        "| model | variant | limit (GMAC/s) | inference img/s | fraction of limit "
        "| train img/s | top-1 agreement | max diff / max |float32| |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, variants in results.items():
        for variant, rounds in variants.items():
            first = rounds[0]
            limit = first.get("limit_dtype")
            rate = _median(rounds, f"host_{limit}_gmac_s") if limit else None
            diff = _median(rounds, "max_logit_diff") or _median(rounds, "max_abs_diff")
            scale = _median(rounds, "max_abs_logit") or _median(rounds, "max_abs_reference")
            agreement = _median(rounds, "top1_agreement")
            lines.append(
                f"| {model} | {variant} | {limit or '-'} {_cell(rate)} "
                f"| {_cell(_median(rounds, 'predict_img_s'))} "
                f"| {_cell(_median(rounds, 'predict_fraction'), 2)} "
                f"| {_cell(_median(rounds, 'train_img_s'))} "
                f"| {'-' if agreement is None else f'{agreement:.1%}'} "
                f"| {'-' if diff is None else f'{_cell(diff, 2)} / {_cell(scale, 2)}'} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gfnet_xs,gfnet_h_ti,hornet_t_gf,afnonet_s4")
    parser.add_argument(
        "--keras",
        default=MAIN_JOB,
        help="comma-separated trained .keras files added to --models (default: the main job's, "
        "trained first if missing; '' for none)",
    )
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--examples", type=int, default=128, help="images compared")
    parser.add_argument("--data", default="digits", help="calibration and agreement images")
    parser.add_argument("--calibration-batches", type=int, default=4, help="batches of 32")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--no-train", action="store_true", help="skip the training steps")
    parser.add_argument("--quick", action="store_true", help="a tiny model: " + str(QUICK))
    parser.add_argument("--out", default=os.path.join("runs", "precision"))
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK, repeats=2)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if unknown := [v for v in variants if v not in VARIANTS]:
        parser.error(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    named = [name for name in args.models.split(",") if name]
    models = named + [_trained(path, args) for path in args.keras.split(",") if path]
    lite = any(variant.startswith("TFLite") for variant in variants)
    files = {model: _prepare(model, args, lite) for model in models}
    results: dict[str, dict[str, list[dict]]] = {_label(model): {} for model in models}
    for round_ in range(args.rounds):
        for model in models:
            for variant in variants:
                name = f"{_label(model)}-{variant.replace(' ', '_')}-{round_}"
                row = _bench(variant, files[model], os.path.join(args.out, "bench", name), args)
                results[_label(model)].setdefault(variant, []).append(row)
    text = host_header(sys.argv[1:] if argv is None else argv) + "\n\n" + table(results)
    print(text)
    atomic_write_text(os.path.join(args.out, "table.md"), text + "\n")
    atomic_write_text(os.path.join(args.out, "results.json"), json.dumps(results, indent=2))
    print(f"wrote {args.out}/table.md and {args.out}/results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
