"""Values a run knows when its graph is built come from one root per pipeline (transforms/launch_values.py):
the local runner runs them as one stage instead of one per Create."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.portability import common_urns
from apache_beam.testing.util import assert_that, equal_to
from conftest import IN_MEMORY

from img2tfrecord.pipeline.runner import pipeline_options
from img2tfrecord.transforms.launch_values import launch_value, launch_values


def test_the_launch_values_of_a_pipeline_share_one_root_and_give_their_values():
    p = beam.Pipeline(options=pipeline_options(list(IN_MEMORY)))
    counts = launch_value(p, "Counts", {"train": 2, "test": 1})
    rows = launch_values(p, "Rows", [("a.jpg", "bad"), ("b.jpg", "bad")])
    start = launch_value(p, "Start", None)
    seen = start | "Seen" >> beam.Map(
        lambda _, counts, rows: (counts, sorted(rows)),
        counts=beam.pvalue.AsSingleton(counts),
        rows=beam.pvalue.AsList(rows),
    )
    transforms = p.to_runner_api().components.transforms.values()
    assert [t.unique_name for t in transforms if t.spec.urn == common_urns.primitives.IMPULSE.urn] == ["LaunchValues"]
    assert_that(seen, equal_to([({"train": 2, "test": 1}, [("a.jpg", "bad"), ("b.jpg", "bad")])]))
    assert p.run().wait_until_finish() == "DONE"
