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
from img2tfrecord.options import template_options

# Template parameter -> convert option: both declared in img2tfrecord/options.py (metadata.json is generated there).
PARAMETERS = {name: option.flag for name, option in template_options().items()}
SWITCHES = {name for name, option in template_options().items() if option.switch}  # true/false: the flag or nothing


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
