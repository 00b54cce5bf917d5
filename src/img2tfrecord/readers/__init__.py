"""Reading a converted output: tf.data (``tfdata``), without TensorFlow (``datasource``, ``records``), TFDS."""
