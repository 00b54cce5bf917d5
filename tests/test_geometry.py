"""Box geometry without a pipeline: orientation, scaling, crop and VOC/COCO parsing."""

from __future__ import annotations

import pytest

from img2tfrecord.conversion.converter import stored_objects
from img2tfrecord.images.geometry import (
    BOX_OUTSIDE_IMAGE,
    CLIPPED_TO_IMAGE,
    ImageTransform,
    clip_to_source,
    identity,
    map_box,
    orient_point,
)
from img2tfrecord.model import Annotation, Box
from img2tfrecord.sources.detection import AnnotationError, parse_voc, parse_xml

ROTATED = {1: (1, 2), 2: (9, 2), 3: (9, 6), 4: (1, 6), 5: (2, 1), 6: (6, 1), 7: (6, 9), 8: (2, 9)}


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orient_point_follows_pillow_transpose(orientation):
    assert orient_point(1, 2, (10, 8), orientation) == ROTATED[orientation]


def test_map_box_clips_and_drops():
    t = ImageTransform((100, 50), 1, (100, 50), 1, (0.5, 0.5), (-5.0, 0.0), (40, 25))  # fill: crop 10 px left
    kept = map_box(t, 0, 0, 40, 20)
    assert kept is not None and kept.clipped and (kept.xmin, kept.xmax) == (0.0, 15.0)
    assert map_box(t, 0, 0, 8, 20) is None
    assert map_box(identity((10, 10)), 1, 1, 5, 5) == (1, 1, 5, 5, False, 1.0)


def test_clip_to_source_keeps_the_part_inside_and_drops_a_box_wholly_outside():
    assert clip_to_source((100, 50), 0, 0, 100, 50) == (0, 0, 100, 50, False, 1.0)  # along every edge: inside
    assert clip_to_source((100, 50), 80, 10, 120, 30) == (80, 10, 100, 30, True, 0.5)
    assert clip_to_source((100, 50), -10, -10, 10, 10) == (0, 0, 10, 10, True, 0.25)
    assert clip_to_source((100, 50), 100, 10, 120, 30) is None  # touches the right edge from outside
    assert clip_to_source((100, 50), 500, 500, 600, 600) is None


def test_a_box_partly_outside_is_clipped_marked_truncated_and_counted():
    t = ImageTransform((100, 50), 1, (100, 50), 1, (0.5, 0.5), (0.0, 0.0), (50, 25))  # stretch to half size
    boxes = (
        Box("a", 10, 10, 30, 20),  # inside
        Box("a", 80, 10, 120, 30, area=400.0),  # half of it beyond the right edge (COCO area given)
        Box("b", 150, 10, 160, 20),  # wholly outside
    )
    objects, reasons = stored_objects(Annotation(boxes, "x"), t, {"a": 1, "b": 2})
    assert reasons == [CLIPPED_TO_IMAGE, BOX_OUTSIDE_IMAGE]
    assert [o.truncated for o in objects] == [False, True]
    clipped = objects[1]
    assert (clipped.xmin, clipped.ymin, clipped.xmax, clipped.ymax) == (0.8, 0.2, 1.0, 0.6)
    assert clipped.area == 400.0 * 0.25 * 0.5  # scaled to stored pixels, and only its part inside


def test_voc_is_one_based_and_refuses_entities():
    box = b"<bndbox><xmin>1</xmin><ymin>1</ymin><xmax>4</xmax><ymax>5</ymax></bndbox>"
    xml = b"<annotation><object><name>a</name>" + box + b"</object></annotation>"
    _, annotation = parse_voc(xml, "Annotations/x.xml")
    assert annotation.boxes == (Box("a", 0.0, 0.0, 4.0, 5.0),)
    with pytest.raises(AnnotationError):
        parse_xml(b'<!DOCTYPE a [<!ENTITY x "y">]><a>&x;</a>')
    with pytest.raises(AnnotationError):
        parse_xml(b"<a>")
