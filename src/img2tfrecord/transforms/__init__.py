"""PTransforms and DoFns of the conversion pipeline, one module per step."""

from img2tfrecord import beam_s3_fixes

beam_s3_fixes.apply()  # in every process that runs these steps, a runner's workers too
