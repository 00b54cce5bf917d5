"""The files generated from the options of ``convert``: the Flex Template's ``metadata.json`` and the table
of ``docs/options.md`` (a test fails when either differs from what this writes).

    python -m img2tfrecord.option_files --flex-metadata > flex_template/metadata.json
    python -m img2tfrecord.option_files --options-table
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from img2tfrecord.option_spec import flex_template_metadata, markdown_table
from img2tfrecord.options import CONVERT_OPTIONS, template_options

TEMPLATE_NAME = "img2tfrecord convert"
TEMPLATE_DESCRIPTION = (
    "Convert an image dataset (class folders, split folders or a glob on Cloud Storage) into shuffled, split, "
    "sharded TFRecord files of tf.train.Example, with dataset.json, labels.txt, errors.jsonl and _SUCCESS."
)


def template_metadata() -> str:
    """``flex_template/metadata.json``: one parameter per option with a template entry."""
    return flex_template_metadata(TEMPLATE_NAME, TEMPLATE_DESCRIPTION, template_options())


def options_table() -> str:
    """The Markdown table of ``docs/options.md``."""
    return markdown_table(CONVERT_OPTIONS)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--flex-metadata"]:
        sys.stdout.write(template_metadata())
    elif args == ["--options-table"]:
        sys.stdout.write(options_table())
    else:
        print("usage: python -m img2tfrecord.option_files --flex-metadata | --options-table", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
