"""``img2tfrecord report OUT``: a self-contained HTML page and a JSON document about a converted dataset.

Neither Beam nor TensorFlow is imported here (TensorFlow only through
:mod:`img2tfrecord.readers.records` for ``gs://`` paths). The modules, in the order
data flows through them:

* :mod:`.shard_scan` -- one pass over one shard in a worker process: per
  record its split, class, file name, size, ``image/key/sha256`` and
  difference hash, plus the seeded thumbnail sample;
* :mod:`.perceptual_hash` -- the 64-bit difference hash and the search for
  pairs within a Hamming distance;
* :mod:`.duplicates` -- exact and near-duplicate groups, split-crossing pair counts;
* :mod:`.facts` -- the ``report.json`` document assembled from the scans;
* :mod:`.svg`, :mod:`.html_page` -- the page, charts as inline SVG;
* :mod:`.command` -- the CLI command: parallel reading, writing both files.
"""
