"""Weights input and output: checkpoint readers, releases, one download-convert-cache pipeline.

Generic machinery only; what is particular to a family (its key map, its
releases, the dispatch of its ``weights=`` argument) stays beside the family
in :mod:`keras_fourier.models` (``gfnet.checkpoint_key``,
``vision_weights``, ``fnet_weights``), as timm keeps ``checkpoint_filter_fn``
beside each model.

* readers, none of which runs code from the file: :mod:`.pth` (PyTorch
  ``.pth``/``.pt``/``.tar`` zips, without PyTorch), :mod:`.flax_msgpack`
  (Flax msgpack checkpoints, without JAX or Flax), :mod:`.keras_hub`
  (keras-hub preset folders, read and written), :mod:`.transformers_folder`
  (Hugging Face model folders) with :mod:`.safetensors_file` (``.safetensors``
  files, bounded, without the safetensors package), :mod:`.saved` (the package's own
  ``.weights.h5`` and ``.keras`` files); the ``.pth`` and ``.safetensors``
  readers return :mod:`.stored` tensors, read only when the conversion takes them;
* :mod:`.convert`: a key map applied to a checkpoint (rename, transform,
  check every key, assign all or nothing), and :mod:`.resize` for the
  resolution-dependent tensors of vision models;
* :mod:`.releases` (keras-free rows: where a release is and which reader
  reads it), :mod:`.download` (the Keras cache, the mirror variable, the
  progress bar, the size cap, deadline, retries and checks of each format)
  and :mod:`.pipeline` (download once, convert once, cache).

This package's ``__init__`` imports nothing: the family modules import
:mod:`.releases` without loading Keras.
"""
