"""The progress line's text and arithmetic, its reporter, the counts behind it, and the Dataflow job link."""

from __future__ import annotations

import io
import logging
import re
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from img2tfrecord import progress
from img2tfrecord.model import error_row
from img2tfrecord.pipeline.plan_model import InputPlan, Plan, Sizing
from img2tfrecord.pipeline.runner import (
    COUNTS_FROM_JOB,
    COUNTS_HERE,
    dataflow_console_url,
    job_counts,
    live_counts,
)
from img2tfrecord.progress import Counts, ProgressReporter, RateMeter, Tally, progress_line
from img2tfrecord.transforms.counters import CountRejectedFn, OutputCounter


def test_the_line_shows_done_of_total_rate_eta_rejected_and_bytes():
    line = progress_line(Counts(written=1197, rejected=3, bytes_written=120_400_000), 12000, "images", 310.0)
    assert line == "1200/12000 images (10%), 310 images/s, ETA 35 s, 3 rejected, 120.4 MB written"


def test_an_unknown_total_shows_a_question_mark_and_no_eta():
    line = progress_line(Counts(40, 2, 5_300), None, "clips", 2.5)
    assert line == "42/? clips, 2.5 clips/s, 2 rejected, 5.3 kB written"


def test_an_unknown_rate_leaves_out_the_rate_and_the_eta():
    assert progress_line(Counts(0, 0, 0), 300, "images", None) == "0/300 images (0%), 0 rejected, 0 B written"


def test_once_every_input_is_done_the_line_says_finishing():
    line = progress_line(Counts(297, 3, 2_800_000), 300, "images", 45.0)
    assert line == "300/300 images (100%), 3 rejected, 2.8 MB written, finishing"


@pytest.mark.parametrize(
    "done, total, rate, expected",
    [(0, 100, 10.0, 10.0), (50, 100, 10.0, 5.0), (100, 100, 10.0, None), (5, None, 10.0, None), (5, 100, None, None)],
)
def test_eta(done, total, rate, expected):
    assert progress.eta_s(done, total, rate) == expected


@pytest.mark.parametrize(
    "seconds, text", [(0, "0 s"), (35.4, "35 s"), (59.6, "1 min 00 s"), (245, "4 min 05 s"), (7380, "2 h 03 min")]
)
def test_durations(seconds, text):
    assert progress.format_duration(seconds) == text


@pytest.mark.parametrize(
    "n, text", [(0, "0 B"), (999, "999 B"), (34_500, "34.5 kB"), (120_400_000, "120.4 MB"), (3_210_000_000, "3.21 GB")]
)
def test_bytes(n, text):
    assert progress.format_bytes(n) == text


def test_the_rate_leaves_out_the_wait_before_the_first_unit_and_follows_the_recent_window():
    meter = RateMeter(window_s=30.0)
    for t in range(10):
        meter.add(float(t), 0)  # start-up: nothing done
    assert meter.rate() is None
    meter.add(10.0, 10)
    meter.add(11.0, 20)
    assert meter.rate() == pytest.approx(10.0)  # from t=9, the last moment with nothing done
    done = 20
    for t in range(12, 100):
        done += 1 if t < 60 else 50
        meter.add(float(t), done)
    assert meter.rate() == pytest.approx(50.0, rel=0.05)


def test_the_interval_comes_from_the_environment_when_it_is_a_positive_number(monkeypatch):
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.25")
    assert progress.log_interval_s() == 0.25
    for bad in ("", "soon", "0", "-3"):
        monkeypatch.setenv(progress.INTERVAL_ENV, bad)
        assert progress.log_interval_s() == progress.DEFAULT_LOG_INTERVAL_S


def test_a_tally_read_since_now_leaves_out_what_was_counted_before():
    tally = Tally()
    tally.add(written=5, rejected=1, bytes_written=100)
    read = progress.tally_since_now(tally)
    tally.add(written=2, bytes_written=40)
    tally.add(rejected=1)
    assert read() == Counts(2, 1, 40)


def test_a_polled_source_asks_at_most_once_per_period_and_keeps_its_last_answer_when_a_poll_fails():
    now = [0.0]
    answers = [Counts(1, 0, 10), RuntimeError("service unavailable"), Counts(7, 1, 90)]
    asked = []

    def fetch():
        asked.append(now[0])
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    polled = progress.Polled(fetch, period_s=5.0, clock=lambda: now[0])
    assert polled() == Counts(1, 0, 10)
    now[0] = 4.0
    assert polled() == Counts(1, 0, 10) and asked == [0.0]
    now[0] = 5.0
    assert polled() == Counts(1, 0, 10)  # the failed poll
    now[0] = 10.0
    assert polled() == Counts(7, 1, 90) and asked == [0.0, 5.0, 10.0]


def _progress_messages(caplog):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress: ")]


def test_the_log_form_logs_every_interval_and_the_last_counts_at_the_end(caplog):
    caplog.set_level(logging.INFO, logger="img2tfrecord.progress")
    tally = Tally()
    reporter = ProgressReporter(progress.tally_since_now(tally), 40, "images", live=False, interval_s=0.05).start()
    for _ in range(20):
        tally.add(written=2, bytes_written=1000)
        time.sleep(0.02)
    reporter.stop()
    messages = _progress_messages(caplog)
    assert len(messages) >= 3
    done = [int(re.match(r"progress: (\d+)/40 images", m).group(1)) for m in messages]
    assert done == sorted(done)
    assert messages[-1] == "progress: 40/40 images (100%), 0 rejected, 20.0 kB written, finishing"


def test_the_log_form_logs_nothing_for_a_run_shorter_than_the_interval(caplog):
    caplog.set_level(logging.INFO, logger="img2tfrecord.progress")
    tally = Tally()
    reporter = ProgressReporter(progress.tally_since_now(tally), 10, "images", live=False, interval_s=10.0).start()
    tally.add(written=10)
    reporter.stop()
    assert _progress_messages(caplog) == []


def test_more_inputs_than_the_launch_saw_make_the_total_unknown(caplog):
    caplog.set_level(logging.INFO, logger="img2tfrecord.progress")
    tally = Tally()
    reporter = ProgressReporter(progress.tally_since_now(tally), 3, "images", live=False, interval_s=0.05).start()
    tally.add(written=5)
    time.sleep(0.3)
    reporter.stop()
    assert _progress_messages(caplog)[-1].startswith("progress: 5/? images, ")


def test_the_live_form_draws_the_line_on_a_terminal_console():
    from rich.console import Console

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=160, color_system=None)
    tally = Tally()
    reporter = ProgressReporter(progress.tally_since_now(tally), 8, "images", live=True, console=console).start()
    tally.add(written=7, rejected=1, bytes_written=2_000_000)
    reporter.stop()
    assert "8/8 images (100%), 1 rejected, 2.0 MB written, finishing" in screen.getvalue()


def test_a_runner_without_live_counts_shows_only_that_it_runs(caplog):
    caplog.set_level(logging.INFO, logger="img2tfrecord.progress")
    reporter = ProgressReporter(None, 10, "images", live=False, interval_s=0.05).start()
    time.sleep(0.2)
    reporter.stop()
    assert _progress_messages(caplog) == ["progress: this runner reports its counts when the job ends"]


# -- the counts: one counter feeds Beam's metrics and this process's tally ------------------------------


class _WriteSome(beam.DoFn):
    def __init__(self):
        self._count = OutputCounter()

    def process(self, n):
        for _ in range(n):
            self._count(None, object())
        self._count.wrote_bytes(100 * n)
        yield n


def test_the_counts_in_beams_metrics_are_the_ones_this_process_tallied():
    read = progress.tally_since_now()
    p = beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=in_memory"]))
    _ = p | "Sizes" >> beam.Create([2, 3]) | "Write" >> beam.ParDo(_WriteSome())
    rows = [error_row(f"/in/{i}.jpg", f"{i}.jpg", "bad_name", "not UTF-8") for i in range(4)]
    _ = p | "Rejected" >> beam.Create(rows) | "Count" >> beam.ParDo(CountRejectedFn())
    result = p.run()
    result.wait_until_finish()
    assert job_counts(result) == Counts(written=5, rejected=4, bytes_written=500) == read()
    reasons = result.metrics().query(beam.metrics.MetricsFilter().with_name("rejected_bad_name"))["counters"]
    assert sum(c.committed for c in reasons) == 4


# -- which runner gives live counts, and what they count toward -----------------------------------------


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], COUNTS_HERE),
        (["--runner=FnApiRunner", "--direct_running_mode=multi_threading"], COUNTS_HERE),
        (["--runner=FnApiRunner", "--direct_running_mode=multi_processing"], None),
        (["--runner=DataflowRunner"], COUNTS_FROM_JOB),
        (["--runner=PortableRunner", "--environment_type=LOOPBACK"], COUNTS_HERE),
        (["--runner=PortableRunner", "--environment_type=EXTERNAL", "--environment_config=localhost:1"], None),
    ],
)
def test_where_live_counts_come_from(args, expected):
    from img2tfrecord.pipeline.runner import pipeline_options

    assert live_counts(pipeline_options(args)) == expected


def _plan(**fields) -> Plan:
    described = InputPlan(**{**dict(base="/in/", pattern="/in/**", layout="class", split_names=("train",)), **fields})
    return Plan(described, Sizing(num_shards={"train": 1}, num_files=120, input_bytes=1000, size_ratio=1.0))


def test_the_total_is_the_launch_count_of_images_when_it_is_whole():
    from img2tfrecord.pipeline.kinds.clips import Clips
    from img2tfrecord.pipeline.kinds.detection import Detection
    from img2tfrecord.pipeline.kinds.folder import Folder

    assert Folder().progress_total(_plan()) == (120, "images")
    assert Folder().progress_total(_plan(listing_complete=False)) == (None, "images")  # a partial peek
    assert Detection().progress_total(_plan(annotations="voc")) == (None, "images")
    assert Clips().progress_total(_plan()) == (None, "clips")


def test_the_dataflow_console_link():
    assert (
        dataflow_console_url("my-project", "europe-west1", "2026-01-02_03_04_05-1234567890")
        == "https://console.cloud.google.com/dataflow/jobs/europe-west1/2026-01-02_03_04_05-1234567890"
        "?project=my-project"
    )
    assert dataflow_console_url("a b", "r/1", "j?") == (
        "https://console.cloud.google.com/dataflow/jobs/r%2F1/j%3F?project=a%20b"
    )
