"""Build and run the conversion pipeline (no image code here).

Importing the package loads no Beam: the launch (``launch.py``: the plan, the input checks, an
append's comparison) runs without it over a local folder; ``pipeline.run`` imports Beam.
"""

from img2tfrecord.pipeline.config import ConvertConfig  # noqa: F401
from img2tfrecord.pipeline.plan import make_plan  # noqa: F401
from img2tfrecord.pipeline.plan_model import Plan, PlanError  # noqa: F401
