"""PTransforms and DoFns of the conversion pipeline, one module per step."""
