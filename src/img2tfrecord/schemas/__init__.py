"""The contract between writer and readers: feature keys and spec, label map, output file names, ``dataset.json``.

Nothing here imports from the rest of the package."""
