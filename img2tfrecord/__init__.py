"""img2tfrecord: image datasets to sharded TFRecord files with Apache Beam."""

__version__ = "0.1.0"
