"""Build and run the conversion pipeline (no image code here)."""

from img2tfrecord.pipeline.config import ConvertConfig  # noqa: F401
from img2tfrecord.pipeline.outputs import OutputNotEmpty  # noqa: F401
from img2tfrecord.pipeline.plan import make_plan  # noqa: F401
from img2tfrecord.pipeline.plan_model import Plan, PlanError  # noqa: F401
from img2tfrecord.pipeline.run import run  # noqa: F401
