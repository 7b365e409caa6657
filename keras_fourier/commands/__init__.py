"""What each subcommand of `keras-fourier` does: one module per subcommand, with `run(args)`.

``keras_fourier.commands.NAME.run(args)`` runs subcommand NAME with the
arguments parsed by the parser that :mod:`keras_fourier.cli` builds from
``keras_fourier.cli.NAME`` (its `NAME`, `HELP`, `DESCRIPTION`,
`SHOW_DEFAULTS` and `add_arguments`), and returns the exit status. These
modules load TensorFlow; the command imports this package only to run a
subcommand. The library they call (training, export, bench, flops, predict)
has no argparse.
"""

from keras_fourier.commands import bench, evaluate, export, flops, predict, train

__all__ = ["bench", "evaluate", "export", "flops", "predict", "train"]
