"""Detection inputs: the drawn picture, VOC / COCO / CSV writers, bad VOC roots and archives of them."""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from typing import Callable, Dict, Optional, Tuple

from PIL import Image

W, H = 160, 120  # the stored pixel array of every generated image (before EXIF orientation)
BACKGROUND = (128, 128, 128)
RED, GREEN, BLUE = (255, 0, 0), (0, 255, 0), (0, 0, 255)
# Rectangles in the stored pixel array, as pixel edges (x0, y0, x1, y1).
RECTS: Dict[str, Tuple[Tuple[int, int, int, int], Tuple[int, int, int]]] = {
    "bird": ((2, 2, 14, 12), GREEN),  # in a corner: the fill crop removes it
    "cat": ((20, 15, 80, 75), RED),
    "dog": ((100, 40, 150, 110), BLUE),
}


def picture(orientation: int = 1) -> bytes:
    img = Image.new("RGB", (W, H), BACKGROUND)
    for (x0, y0, x1, y1), color in RECTS.values():
        img.paste(color, (x0, y0, x1, y1))
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=100, exif=exif.tobytes())
    return out.getvalue()


def write_voc(root: str, images: Dict[str, int], extra_objects: str = "") -> None:
    os.makedirs(os.path.join(root, "JPEGImages"))
    os.makedirs(os.path.join(root, "Annotations"))
    for name, orientation in images.items():
        with open(os.path.join(root, "JPEGImages", name + ".jpg"), "wb") as f:
            f.write(picture(orientation))
        objects = "".join(
            f"<object><name>{label}</name><truncated>0</truncated><difficult>0</difficult>"
            f"<bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
            for label, ((x0, y0, x1, y1), _) in RECTS.items()
        )
        xml = (
            f"<annotation><filename>{name}.jpg</filename><size><width>{W}</width><height>{H}</height>"
            f"<depth>3</depth></size>{objects}{extra_objects}</annotation>"
        )
        with open(os.path.join(root, "Annotations", name + ".xml"), "w") as f:
            f.write(xml)


def write_coco(root: str, images: Dict[str, int], change: Optional[Callable[[dict], None]] = None) -> None:
    """A COCO folder of ``images`` (name -> EXIF orientation) and their boxes; ``change`` edits the JSON first."""
    os.makedirs(os.path.join(root, "annotations"))
    os.makedirs(os.path.join(root, "images"))
    doc: Dict[str, list] = {"images": [], "annotations": [], "categories": []}
    ids = {label: 10 + i for i, label in enumerate(RECTS)}  # COCO ids need not start at 1
    doc["categories"] = [{"id": i, "name": label} for label, i in ids.items()]
    for image_id, (name, orientation) in enumerate(images.items(), 1):
        with open(os.path.join(root, "images", name + ".jpg"), "wb") as f:
            f.write(picture(orientation))
        doc["images"].append({"id": image_id, "file_name": name + ".jpg", "width": W, "height": H})
        for label, ((x0, y0, x1, y1), _) in RECTS.items():
            doc["annotations"].append(
                {
                    "id": len(doc["annotations"]) + 1,
                    "image_id": image_id,
                    "category_id": ids[label],
                    "bbox": [x0, y0, x1 - x0, y1 - y0],
                    "area": (x1 - x0) * (y1 - y0),
                    "iscrowd": 0,
                }
            )
    if change is not None:
        change(doc)
    with open(os.path.join(root, "annotations", "instances_data.json"), "w") as f:
        json.dump(doc, f)


def write_csv(root: str, images: Dict[str, int], extra_rows: str = "") -> str:
    os.makedirs(os.path.join(root, "images"))
    lines = ["path,label,xmin,ymin,xmax,ymax"]
    for name, orientation in images.items():
        with open(os.path.join(root, "images", name + ".jpg"), "wb") as f:
            f.write(picture(orientation))
        for label, ((x0, y0, x1, y1), _) in RECTS.items():
            lines.append(f"images/{name}.jpg,{label},{x0},{y0},{x1},{y1}")
    path = os.path.join(root, "boxes.csv")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n" + extra_rows)
    return path


def write_voc_with_bad_annotations(root: str, images: Dict[str, int]) -> None:
    """A VOC folder of ``images`` whose boxes include two bad ones and one partly outside the image, plus a
    malformed annotation, a DTD bomb, an annotation of a missing image and ``empty.jpg`` annotated without boxes."""
    bad_boxes = (
        "<object><name>dog</name><bndbox><xmin>50</xmin><ymin>5</ymin><xmax>40</xmax><ymax>9</ymax></bndbox></object>"
        "<object><name>cat</name><bndbox><xmin>500</xmin><ymin>500</ymin><xmax>600</xmax><ymax>600</ymax></bndbox>"
        "</object>"
        f"<object><name>cat</name><bndbox><xmin>{W - 19}</xmin><ymin>{H - 29}</ymin><xmax>{W + 20}</xmax>"
        f"<ymax>{H + 30}</ymax></bndbox></object>"  # the bottom-right 20x30 of it is inside
    )
    write_voc(root, images, extra_objects=bad_boxes)
    ann = os.path.join(root, "Annotations")
    with open(os.path.join(ann, "broken.xml"), "w") as f:
        f.write("<annotation><filename>broken.jpg</filename>")  # malformed
    with open(os.path.join(ann, "bomb.xml"), "w") as f:
        f.write('<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "xxxxxxxx">]><annotation>&x;</annotation>')
    with open(os.path.join(ann, "missing.xml"), "w") as f:
        f.write("<annotation><filename>missing.jpg</filename></annotation>")  # no such image
    with open(os.path.join(ann, "empty.xml"), "w") as f:
        f.write("<annotation><filename>empty.jpg</filename></annotation>")  # an image without boxes
    with open(os.path.join(root, "JPEGImages", "empty.jpg"), "wb") as f:
        f.write(picture())


RESIZE = ("--image-size", "64", "--resize", "fit", "--format", "png")
VOC_TOP = "VOCdevkit/VOC2012"


def pack(folder: str, archive: str, top: str = "") -> str:
    """Every file under ``folder`` into ``archive`` (.zip, .tar or .tar.gz), under the folder ``top``."""
    files = []
    for directory, _, names in os.walk(folder):
        for name in sorted(names):
            path = os.path.join(directory, name)
            files.append((path, "/".join(p for p in (top, os.path.relpath(path, folder).replace(os.sep, "/")) if p)))
    files.sort(key=lambda f: f[1])
    if archive.endswith(".zip"):
        with zipfile.ZipFile(archive, "w") as z:
            for i, (path, name) in enumerate(files):
                z.write(path, name, zipfile.ZIP_DEFLATED if i % 2 else zipfile.ZIP_STORED)
    else:
        with tarfile.open(archive, "w:gz" if archive.endswith(".gz") else "w") as t:
            for path, name in files:
                t.add(path, name)
    return archive


def write_bad_voc(root: str) -> None:
    """A VOC root: good images (EXIF orientations), bad boxes, bad and missing annotations, image sets."""
    write_voc_with_bad_annotations(root, {"o1": 1, "o3": 3, "o6": 6, "o8": 8})
    with open(os.path.join(root, "Annotations", "orphan.xml"), "w") as f:
        f.write("<annotation><filename>orphan.jpg</filename></annotation>")  # in no image set
    for name in ("orphan", "stray"):  # stray.jpg: no annotation names it, so it is no input
        with open(os.path.join(root, "JPEGImages", name + ".jpg"), "wb") as f:
            f.write(picture())
    sets = os.path.join(root, "ImageSets", "Main")
    os.makedirs(sets)
    with open(os.path.join(sets, "train.txt"), "w") as f:
        f.write("o1\no3\nmissing\nbroken\n")
    with open(os.path.join(sets, "val.txt"), "w") as f:
        f.write("o6\no8\nempty\n")
    with open(os.path.join(sets, "dog_train.txt"), "w") as f:  # a per-class set: not a split
        f.write("o1 1\no6 -1\n")


def write_voc_tar_with_link_and_twin(directory: str) -> str:
    """``DIRECTORY/voc.tar``: VOC images good, twice, linked, where ``twice.jpg`` is two members and
    ``linked.jpg`` a symbolic link; returns its path."""
    root = os.path.join(directory, "voc")
    write_voc(root, {"good": 1, "twice": 1, "linked": 1})
    archive = os.path.join(directory, "voc.tar")
    with tarfile.open(archive, "w") as t:
        for folder in ("Annotations", "JPEGImages"):
            for name in sorted(os.listdir(os.path.join(root, folder))):
                if name != "linked.jpg":
                    t.add(os.path.join(root, folder, name), f"{folder}/{name}")
        data = picture()
        info = tarfile.TarInfo("JPEGImages/twice.jpg")  # a second member of this name
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("JPEGImages/linked.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "good.jpg"
        t.addfile(link)
    return archive
