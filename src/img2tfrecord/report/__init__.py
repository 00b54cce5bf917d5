"""``img2tfrecord report OUT``: a self-contained HTML page, a JSON document and JSON-lines files about a dataset.

Neither Beam nor TensorFlow is imported here (TensorFlow only through
:mod:`img2tfrecord.readers.records` for ``gs://`` paths). The modules, in the order
data flows through them:

* :mod:`.shard_scan` -- one pass over one shard in a worker process (started by
  :mod:`.workers`): per record its columns (class, file name, offset,
  ``image/key/sha256``, difference hash), counts per class and image size, and
  the seeded thumbnail sample's candidates;
* :mod:`.record_table` -- every record's columns in the launching process;
* :mod:`.perceptual_hash` -- the 64-bit difference hash;
* :mod:`.near_search` -- the pairs of hashes within a Hamming distance (faiss);
* :mod:`.duplicates` -- exact and near-duplicate groups, formed one at a time, and
  the split-crossing pair counts;
* :mod:`.group_lines`, :mod:`.facts` -- the groups as JSON, the ``report.json`` document;
* :mod:`.outputs` -- the files: names, JSON lines, temporary names until done;
* :mod:`.svg`, :mod:`.html_common`, :mod:`.page_classes`, :mod:`.html_page` -- the page.

The command itself (parallel reading, writing the files) is
:mod:`img2tfrecord.commands.report`.
"""
