"""The names `keras_fourier.commands` imported from here before `keras_fourier.tasks` existed.

Kept until the command layer imports them from :mod:`keras_fourier.tasks`.
"""

from keras_fourier.tasks import CLASS_NAMES_KEY, CROP_PCT_KEY, Task, select_task
from keras_fourier.tasks.text_classification import stored_tokenizer

__all__ = ["CLASS_NAMES_KEY", "CROP_PCT_KEY", "stored_tokenizer", "task_for_data"]


def task_for_data(data: str) -> Task:
    """The task of a saved model evaluated on `data` (`keras_fourier.tasks.select_task`)."""
    return select_task(data)
