"""PTransforms and DoFns of the conversion pipeline, one module per step."""

from img2tfrecord import beam_filesystem_fixes

beam_filesystem_fixes.apply()  # in every process that runs these steps, a runner's workers too
