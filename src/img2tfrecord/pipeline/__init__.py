"""Launch, build and run the conversion pipeline (no image code here).

Importing the package loads no Beam: the launch (``launch.py``: the input's kind and plan, the input
checks, an append's comparison) runs without it over a local folder; ``pipeline.run`` imports Beam.
"""
