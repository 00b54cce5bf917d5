"""The last steps of every conversion, the same for ``convert`` and ``ImagesToTFRecords`` (:class:`FinishOutput`):
the train split analysed with tf.Transform, then every rejected row into the error report, counted by
reason, ``dataset.json``, ``labels.txt`` and ``_SUCCESS`` (``finalize.FinalizeOutput``)."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Sequence

import apache_beam as beam

from img2tfrecord.conversion.run_totals import RunTotals
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.transforms.finalize import FinalizeOutput
from img2tfrecord.transforms.launch_values import launch_value

# The parts FinishOutput takes, a dict of PCollections: the committed shards, every error row, the train
# records' analysis rows, the class list (one element), the inputs and the junk files counted (one each),
# and optionally what an archive run's members file step gave (FinalizeOutput waits for it).
SHARDS, ERRORS, ANALYSIS_ROWS, LABELS, NUM_INPUTS, NUM_SKIPPED, MEMBERS = (
    "shards",
    "errors",
    "analysis_rows",
    "labels",
    "num_inputs",
    "num_skipped",
    "members",
)


@dataclasses.dataclass(frozen=True)
class Analysis:
    """The tf.Transform analysis of a run's train split: its image options (``--exact-statistics``, ``--sequence``)
    and splits, whether its records carry labels, and an append's totals of the generations before it
    (``base_exact``: those are exact); ``record_spec``: the records' spec for the written schema when they
    carry more than the task's features (a URL list's URL and caption)."""

    image: ImageOptions
    exact_statistics: bool
    sequence: bool
    split_names: Sequence[str]
    labeled: bool
    base: Optional[RunTotals] = None
    base_exact: bool = True
    record_spec: Optional[Dict[str, Dict[str, Any]]] = None  # dataset.json's feature spec when not the task's


class FinishOutput(beam.PTransform):
    """The parts of a conversion (a dict keyed as above) -> the analysis (``analysis``; None: not analysed,
    published through the staging folder ``run_dir``) and ``finalize``'s error report (``errors.jsonl``, an
    append's ``errors-g<N>.jsonl``), ``dataset.json``, ``labels.txt`` and ``_SUCCESS``; returns ``finalize``'s
    output (the manifest). The error rows reach ``finalize`` as an iterable side input, which it writes as
    it counts them per reason."""

    def __init__(self, finalize: FinalizeOutput, run_dir: str, analysis: Optional[Analysis] = None):
        super().__init__()
        self._finalize = finalize
        self._run_dir = run_dir
        self._analysis = analysis

    def expand(self, parts: Dict[str, Any]):
        errors = parts[ERRORS]
        side: Dict[str, Any] = {}
        analysis = self._analysis
        if analysis is not None:
            from img2tfrecord.transforms.analyze import analyze_train_split  # imports TensorFlow

            statistics = analyze_train_split(
                parts[ANALYSIS_ROWS],
                parts[LABELS],
                analysis.image,
                analysis.split_names,
                self._run_dir,
                analysis.labeled,
                base=analysis.base,
                base_exact=analysis.base_exact,
                exact_statistics=analysis.exact_statistics,
                sequence=analysis.sequence,
                record_spec=analysis.record_spec,
            )
            if statistics is not None:  # FinalizeOutput waits for the exported transform
                side["statistics"] = beam.pvalue.AsSingleton(statistics)
        if MEMBERS in parts:
            side["unused_members"] = beam.pvalue.AsList(parts[MEMBERS])
        return launch_value(errors.pipeline, "Start", None) | "FinalizeOutput" >> beam.ParDo(
            self._finalize,
            label_names=beam.pvalue.AsSingleton(parts[LABELS]),
            shards=beam.pvalue.AsList(parts[SHARDS]),
            error_rows=beam.pvalue.AsIter(errors),
            num_inputs=beam.pvalue.AsSingleton(parts[NUM_INPUTS]),
            num_skipped=beam.pvalue.AsSingleton(parts[NUM_SKIPPED]),
            **side,
        )
