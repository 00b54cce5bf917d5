"""What an input kind answers: :class:`InputKind`. Each kind is one subclass in one module of this package,
and one line in the table of ``kinds/__init__.py``, the only place that asks which kind an input is."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence, Tuple

from img2tfrecord.conversion.seeded_hashes import DEFAULT_SPLIT, Splits
from img2tfrecord.option_values import TASK_CLASSIFICATION
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.plan_model import Plan

if TYPE_CHECKING:
    from img2tfrecord.conversion.converter import Converter
    from img2tfrecord.pipeline.inputs import LocalInputReport
    from img2tfrecord.pipeline.kinds.ledger import InputLedger
    from img2tfrecord.sources.inputs import InputSource


class InputKind:
    """One kind of input: whether an input is of this kind, its plan, its ``InputSource``, its ledger and
    its converter, and what the run does differently for it (the class attributes).

    ``name``: the kind's one name, in the plan, ``--plan`` and messages. ``task``: the records' task.
    ``sequence``: one ``tf.train.SequenceExample`` per clip (one clip per conversion task).
    ``analysable``: the train split can be analysed with tf.Transform (else ``analysis_note`` says why,
    at ``analysis_note_level``). ``counts_known_at_launch``: the launch's count of inputs is the run's.
    ``records_members``: a ledger entry is an archive; the run records what each gave.
    ``discovers_from_ledger``: where the graph discovers the work items, it reads the files the launch
    listed (its ledger) instead of matching the input again. ``discover_step``: that step's label.
    """

    name = ""
    task = TASK_CLASSIFICATION
    sequence = False
    analysable = True
    analysis_note = ""
    analysis_note_level = logging.INFO
    counts_known_at_launch = True
    records_members = False
    discovers_from_ledger = False
    discover_step = "DiscoverImages"
    batch_size = 32  # work items per conversion task

    def claims(self, config: ConvertConfig) -> bool:
        """Whether ``config.input`` may be of this kind, from its name, the options and (at most) its
        listing; :meth:`plan` may still find that it is not."""
        raise NotImplementedError

    def plan(self, config: ConvertConfig, whole: bool) -> Optional[Plan]:
        """The launch plan of ``config.input`` as this kind (layout, splits, sizes), or None when its content
        shows another kind; PlanError for an input no run can convert. ``whole`` False: without what only a
        run over all of the input needs (an append sizes its new inputs)."""
        raise NotImplementedError

    def source(self, config: ConvertConfig, plan: Plan) -> InputSource:
        """How the units of ``plan``'s input are listed and read, in the pipeline and by ``--plan``."""
        raise NotImplementedError

    def ledger(self, config: ConvertConfig, plan: Plan) -> Optional[InputLedger]:
        """The listing of the inputs a run records, or None for an input that keeps no ledger."""
        raise NotImplementedError

    def converter(self, config: ConvertConfig, plan: Plan) -> Converter[Any]:
        """What converts one work item of ``plan``'s input into its record or error row."""
        from img2tfrecord.conversion.converter import ImageConverter
        from img2tfrecord.schemas import transformed

        sums_split = transformed.ANALYZED_SPLIT if config.analyze else None
        return ImageConverter(
            config.image, plan.input.layout, run_splits(config), config.seed, sums_split, config.exact_statistics
        )

    def places_at_launch(self, config: ConvertConfig) -> bool:
        """Whether a run groups the work items by shard at launch, instead of discovering them in the graph."""
        return not config.dedupe

    def check_local(self, plan: Plan) -> Optional[LocalInputReport]:
        """The launch check of a local input folder (logged as warnings), or None: nothing to check."""
        return None

    def units(self, items: Sequence[Any], layout: str) -> Sequence[Any]:
        """What one record is made of, from the listed files: the files themselves, or clips of them."""
        return items

    def feature_spec(self, config: ConvertConfig, plan: Plan) -> Optional[Dict[str, Dict[str, Any]]]:
        """``dataset.json``'s feature spec of the records, when this kind's differ from the task's (None)."""
        return None

    def class_noun(self, plan: Plan) -> str:
        """What a class is called in messages: class folder(s), label(s), class(es) of objects."""
        return "class folder(s)"

    def progress_total(self, plan: Plan) -> Tuple[Optional[int], str]:
        """What a run's progress counts toward: the launch's count of inputs (None: unknown) and their unit."""
        if self.sequence:
            return None, "clips"
        if not self.counts_known_at_launch or not plan.input.listing_complete:
            return None, "images"
        return plan.sizing.num_files, "images"


def run_splits(config: ConvertConfig) -> Splits:
    """The seeded splits a converter places items with: ``--splits``, or everything in ``train``."""
    return config.splits or ((DEFAULT_SPLIT, 1.0),)
