"""Dataflow Flex Template entry point: ``img2tfrecord convert`` with template parameters.

Dataflow passes every template parameter as ``--name=value``. Parameter
names use underscores (``image_size``); they are mapped to the CLI's own
option names (``--image-size``) here, and every other option (Beam's
``--runner``, ``--project``, ``--temp_location``, ...) passes through. The
launcher submits the job and returns (``--no-wait``): the job itself writes
``_SUCCESS`` into the output when it completes.
"""
import sys

from img2tfrecord import cli

# Template parameter -> convert option (see metadata.json).
PARAMETERS = {
    "input": "--input",
    "output": "--output",
    "image_size": "--image-size",
    "resize": "--resize",
    "format": "--format",
    "quality": "--quality",
    "splits": "--splits",
    "seed": "--seed",
    "shard_size_mb": "--shard-size-mb",
    "num_shards": "--num-shards",
    "compression": "--compression",
    "max_error_rate": "--max-error-rate",
    "overwrite": "--overwrite",
    "resume": "--resume",
    "exact_statistics": "--exact-statistics",
}
SWITCHES = {"overwrite", "resume", "exact_statistics"}  # true/false parameters: the option or nothing


def translate(argv):
    """Template-style ``--image_size=224`` arguments to ``convert`` arguments."""
    out = []
    for arg in argv:
        name, sep, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name in PARAMETERS:
            if name in SWITCHES:
                if value.lower() in ("", "true", "1", "yes"):
                    out.append(PARAMETERS[name])
                continue
            out.append(f"{PARAMETERS[name]}={value}" if sep else PARAMETERS[name])
        else:
            out.append(arg)
    return ["convert", *out, "--no-wait"]


if __name__ == "__main__":
    cli.run(translate(sys.argv[1:]))
