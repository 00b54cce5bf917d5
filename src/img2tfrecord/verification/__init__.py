"""``img2tfrecord verify DIR``: check every byte of a converted output directory.

Checks, reading every record of every shard listed in ``dataset.json``:

* the directory: ``_SUCCESS`` present, ``labels.txt`` equal to the manifest's
  labels, every listed shard on disk and every shard on disk listed;
* each shard: TFRecord framing and both masked CRC32C checksums of every
  record, the record count and file size against ``dataset.json``;
* each record: a ``tf.train.Example`` with every feature of the declared
  spec, holding one value each; its image decodes (Pillow) to the declared
  height, width and channels, in the declared format; the label id is in
  range and names ``image/class/text`` in ``dataset.json``'s labels;
  ``image/key/sha256`` is the SHA-256 of ``image/encoded``;
* each detection record: every per-object list of one length, every box
  within [0, 1] with min < max, every class id in ``label_map.pbtxt`` naming
  the box's class text; ``label_map.pbtxt`` equal to ``labels.txt``'s ids + 1;
* the accounting: per-split and per-class counts (boxes per class for
  detection) found in the records against ``dataset.json``, and the rejected inputs against ``errors.jsonl``;
* the tf.Transform analysis, when ``dataset.json`` has its statistics: the
  exported transform (``transform_fn/saved_model.pb``) and
  ``transformed_metadata/`` present; ``schema.pbtxt`` and
  ``metadata/schema.pbtxt`` parse as tensorflow_metadata Schemas naming
  exactly the manifest's features; the ``label`` vocabulary asset equal to
  ``labels.txt``; the statistics' example counts equal to their split's, one
  mean and one standard deviation per channel, within [0, 1].

Exit codes: 0 all checks hold (one OK line), 1 some do not (a report naming
shard, record and problem, at most :data:`MAX_PROBLEMS_PER_SCOPE` per shard
plus a count of the rest), 2 no such directory or no ``dataset.json``.
Corrupt data never produces a traceback.

The modules:

* :mod:`.findings` -- :class:`Problem` and :class:`Report`, what verify found;
* :mod:`.record_checks` -- one shard and its records (:func:`check_shard`,
  :func:`check_record`, :func:`check_sequence_record`, :func:`check_image`,
  :func:`object_problems`);
* :mod:`.output_checks` -- the directory, counts, accounting and tf.Transform
  analysis; :func:`.output_checks.verify` runs every check.
"""
