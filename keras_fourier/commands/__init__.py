"""The subcommands of `keras-fourier`, one module each, and their shared argument helpers.

Each subcommand module has `NAME`, `HELP`, `DESCRIPTION`, `SHOW_DEFAULTS`
(whether its help shows defaults), `add_arguments(parser)` and
`run(args) -> exit status`; :mod:`keras_fourier.cli` lists them. The library
they call (training, export, bench, flops, predict) has no argparse.
"""
