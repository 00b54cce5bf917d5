"""What ``--input`` names: a folder (or glob) of images, archives, or manifests."""

from __future__ import annotations

from img2tfrecord.sources.archives import archive_kind
from img2tfrecord.sources.manifests import manifest_kind

INPUT_FOLDER = "folder"
INPUT_ARCHIVES = "archives"
INPUT_MANIFEST = "manifest"
INPUT_DETECTION = "detection"  # annotations (VOC, COCO, a manifest of boxes): the plan decides, not the name


def input_kind(path: str) -> str:
    """What ``--input`` names: archives, manifests (one file or a glob of them), or a folder/glob of images."""
    if archive_kind(path):
        return INPUT_ARCHIVES
    if manifest_kind(path):
        return INPUT_MANIFEST
    return INPUT_FOLDER
