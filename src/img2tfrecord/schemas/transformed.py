"""Names in the tf.Transform output of ``convert``: transformed features, vocabulary, statistics.

``tft.TFTransformOutput(<output dir>)`` applied to raw records (parsed with
``raw_feature_spec()``, i.e. the keys of :mod:`schemas.features`) gives the
features named here. The files and folders it reads are named in
:mod:`schemas.output_files`.
"""

from __future__ import annotations

# Transformed features.
IMAGE = "image"  # float32 [H, W, C]: decoded, scaled to [0, 1], normalised with the train mean/std
LABEL = "label"  # int64: the class id, looked up in the LABEL_VOCABULARY

# Inputs of the analysis only, never in a record: per train image, the exact per-channel
# sum and sum of squares of its uint8 pixels (int64 [C]), computed where it is converted.
# Added to the train examples on their way to tf.Transform; the exported transform does
# not use them, so readers and serving never pass them.
PIXEL_SUM = "analysis/pixel_sum"
PIXEL_SQUARE_SUM = "analysis/pixel_square_sum"
ANALYSIS_FEATURES = (PIXEL_SUM, PIXEL_SQUARE_SUM)

# Vocabulary files of the transform (``TFTransformOutput.vocabulary_by_name``).
LABEL_VOCABULARY = "label"  # line i is the class name of id i: the same list as labels.txt

# The split whose statistics the transform applies to every split.
ANALYZED_SPLIT = "train"
