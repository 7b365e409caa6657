"""``python -m keras_fourier.cli``: the `keras-fourier` command."""

import sys

from keras_fourier.cli import main

if __name__ == "__main__":
    sys.exit(main())
