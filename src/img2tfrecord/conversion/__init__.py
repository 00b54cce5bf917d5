"""Work items to records, without Beam or TensorFlow: split and shard hashing, the converters, the process pool."""
