"""Nightly img2tfrecord conversion on Dataflow, scheduled with Apache Airflow.

Launches the img2tfrecord Flex Template (see README "Flex Template") once a
day into a dated output folder, then waits for the job's ``_SUCCESS`` file:
the job writes it last, so the sensor succeeds only for a complete output,
and a failed or over-budget job never produces it. Set the Airflow
Variables ``img2tfrecord_project``, ``img2tfrecord_region``,
``img2tfrecord_template`` (gs:// path of the template spec),
``img2tfrecord_input`` and ``img2tfrecord_output_root``.

Needs ``apache-airflow-providers-google``.
"""

from __future__ import annotations

import datetime

from airflow import DAG
from airflow.providers.google.cloud.operators.dataflow import DataflowStartFlexTemplateOperator
from airflow.providers.google.cloud.sensors.gcs import GCSObjectExistenceSensor

OUTPUT = "{{ var.value.img2tfrecord_output_root }}/{{ ds_nodash }}"

with DAG(
    dag_id="img2tfrecord_nightly",
    schedule="0 2 * * *",
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    default_args={"retries": 1, "retry_delay": datetime.timedelta(minutes=10)},
    tags=["img2tfrecord"],
) as dag:
    convert = DataflowStartFlexTemplateOperator(
        task_id="convert",
        project_id="{{ var.value.img2tfrecord_project }}",
        location="{{ var.value.img2tfrecord_region }}",
        wait_until_finished=True,
        body={
            "launchParameter": {
                "jobName": "img2tfrecord-{{ ds_nodash }}",
                "containerSpecGcsPath": "{{ var.value.img2tfrecord_template }}",
                "parameters": {
                    "input": "{{ var.value.img2tfrecord_input }}",
                    "output": OUTPUT,
                    "image_size": "224",
                    "splits": "train=0.8,validation=0.1,test=0.1",
                    "seed": "42",
                    "max_error_rate": "0.01",
                    # A retry of the same day replaces an unfinished attempt.
                    "overwrite": "true",
                },
            }
        },
    )

    complete = GCSObjectExistenceSensor(
        task_id="output_complete",
        bucket="{{ var.value.img2tfrecord_output_root.split('/')[2] }}",
        object="{{ '/'.join(var.value.img2tfrecord_output_root.split('/')[3:] + [ds_nodash, '_SUCCESS']) }}",
        mode="reschedule",
        poke_interval=300,
        timeout=6 * 3600,
    )

    convert >> complete
