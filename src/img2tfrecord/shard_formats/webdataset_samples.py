"""A serialized record as the members of one WebDataset sample, and the members back as the same record.

A sample of key ``KEY`` (no dots: WebDataset splits a member name at its first dot) holds

* ``KEY.jpg`` / ``KEY.png`` / ``KEY.raw``: ``image/encoded`` as stored (its extension from ``image/format``);
  a ``--sequence`` clip has one ``KEY.NNNNN.<ext>`` member per frame, in order;
* ``KEY.cls``: the label id (``image/class/label``) in decimal, for labeled records;
* ``KEY.txt``: the caption (``image/text``, a URL list's) as UTF-8 text, for records that have one;
* ``KEY.json``: every other feature of the record under its feature key (``schemas/features.py``): a
  feature of one value as that value, an object list of a detection record or a feature of several
  values as a list; bytes as UTF-8 text (``{"base64": ...}`` for bytes that are not UTF-8).

:func:`record_from_members` rebuilds the record byte for byte (records are serialized with sorted
keys), so every reader of a WebDataset output checks and parses the records a TFRecord run holds.
No Beam and no TensorFlow.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.example_proto import Example, SequenceExample

LABEL = "cls"  # the label id
JSON = "json"  # every other feature
TEXT = "txt"  # the caption, also in .json
IMAGE_EXTENSIONS = {"jpeg": "jpg", "png": "png", "raw": "raw"}  # image/format -> extension
_LIST_FEATURES = frozenset(keys.OBJECT_FEATURES)  # always lists, even of one value
# The kind of an empty list in a feature the schema declares (an image without boxes).
_DECLARED_KINDS = {key: dtype for key, (dtype, _) in keys.OBJECT_FEATURES.items()}
_LIST_KIND = {"int64": "int64_list", "float": "float_list", "string": "bytes_list"}
_FRAME_DIGITS = 5


class SampleError(ValueError):
    """Members that do not make one record (a member missing, or one this format does not write)."""


def image_extension(image_format: Optional[str]) -> str:
    """The member extension of an image stored in ``image_format`` (``jpeg`` -> ``jpg``)."""
    if not image_format:
        return "bin"
    known = IMAGE_EXTENSIONS.get(image_format)
    if known:
        return known
    return image_format if image_format.isalnum() else "bin"


def _text(value: bytes) -> Any:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def _bytes(value: Any) -> bytes:
    if isinstance(value, dict):
        return base64.b64decode(value["base64"])
    if not isinstance(value, str):
        raise SampleError(f"{value!r:.40} is not text where bytes are stored")
    return value.encode("utf-8")


def _json_features(feature_map: Any, skip: Sequence[str]) -> Dict[str, Any]:
    """Every feature of a feature map but ``skip``, as JSON values (see the module docstring)."""
    out: Dict[str, Any] = {}
    for key in sorted(feature_map):
        if key in skip:
            continue
        feature = feature_map[key]
        kind = feature.WhichOneof("kind")
        if kind is None:
            out[key] = None
            continue
        stored = getattr(feature, kind).value
        if kind == "bytes_list":
            values = [_text(v) for v in stored]
        elif kind == "float_list":
            values = [float(v) for v in stored]
        else:
            values = list(stored)
        out[key] = values[0] if len(values) == 1 and key not in _LIST_FEATURES else values
    return out


def _kind_of(key: str, values: List[Any]) -> str:
    if not values:
        return _LIST_KIND[_DECLARED_KINDS.get(key, "string")]  # metadata: an empty list is a bytes list
    first = values[0]
    if isinstance(first, bool):
        raise SampleError(f"feature {key}: {first!r} is not a value a record stores")
    if isinstance(first, int):
        return "int64_list"
    if isinstance(first, float):
        return "float_list"
    return "bytes_list"


def _set_features(feature_map: Any, doc: Mapping[str, Any]) -> None:
    for key, value in doc.items():
        feature = feature_map[key]
        if value is None:
            continue  # a feature of no kind: the entry alone
        values = value if isinstance(value, list) else [value]
        kind = _kind_of(key, values)
        target = getattr(feature, kind)
        target.SetInParent()
        if kind == "bytes_list":
            target.value.extend(_bytes(v) for v in values)
        elif kind == "float_list":
            target.value.extend(float(v) for v in values)
        else:
            target.value.extend(int(v) for v in values)


def _label_member(feature_map: Any) -> List[Tuple[str, bytes]]:
    if keys.CLASS_LABEL not in feature_map:
        return []
    labels = feature_map[keys.CLASS_LABEL].int64_list.value
    return [(LABEL, str(labels[0]).encode("ascii"))] if len(labels) == 1 else []


def _text_member(feature_map: Any) -> List[Tuple[str, bytes]]:
    if keys.IMAGE_TEXT not in feature_map:
        return []
    texts = feature_map[keys.IMAGE_TEXT].bytes_list.value
    return [(TEXT, texts[0])] if len(texts) == 1 else []


def _format_of(feature_map: Any) -> Optional[str]:
    found = feature_map[keys.IMAGE_FORMAT].bytes_list.value if keys.IMAGE_FORMAT in feature_map else []
    return found[0].decode("utf-8", "replace") if len(found) == 1 else None


def sample_members(record: bytes, sequence: bool = False) -> List[Tuple[str, bytes]]:
    """``(extension, data)`` of each member of the sample of a serialized Example (SequenceExample with
    ``sequence``), in the order they are written; ValueError for bytes that are not such a record."""
    if sequence:
        clip = SequenceExample.FromString(record)
        context = clip.context.feature
        lists = clip.feature_lists.feature_list
        other = sorted(set(lists) - {keys.IMAGE_ENCODED})
        if other:
            raise SampleError(f"feature list {other[0]} has no member in a WebDataset sample")
        ext = image_extension(_format_of(context))
        frames = list(lists[keys.IMAGE_ENCODED].feature) if keys.IMAGE_ENCODED in lists else []
        members = []
        for i, frame in enumerate(frames):
            values = frame.bytes_list.value
            if len(values) != 1:
                raise SampleError(f"frame {i} holds {len(values)} images")
            members.append((f"{i:0{_FRAME_DIGITS}d}.{ext}", values[0]))
        doc = _json_features(context, ())
        return members + _label_member(context) + [(JSON, _dumps(doc))]
    example = Example.FromString(record)
    feature = example.features.feature
    members = []
    if keys.IMAGE_ENCODED in feature:
        images = feature[keys.IMAGE_ENCODED].bytes_list.value
        if len(images) != 1:
            raise SampleError(f"{keys.IMAGE_ENCODED} holds {len(images)} values, not one image")
        members.append((image_extension(_format_of(feature)), images[0]))
    doc = _json_features(feature, (keys.IMAGE_ENCODED,))
    return members + _label_member(feature) + _text_member(feature) + [(JSON, _dumps(doc))]


def _dumps(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def check_label_member(members: Mapping[str, bytes], doc: Mapping[str, Any]) -> None:
    """:class:`SampleError` unless ``.cls`` is the label ``.json`` holds (present exactly when it has one)."""
    label = doc.get(keys.CLASS_LABEL)
    expected = str(label).encode("ascii") if isinstance(label, int) and not isinstance(label, bool) else None
    found = members.get(LABEL)
    if found == expected:
        return
    if found is None:
        raise SampleError(f"no .{LABEL} member, where .{JSON} holds label {label}")
    if expected is None:
        raise SampleError(f".{LABEL} member {found[:20]!r} in a sample whose .{JSON} holds no single label")
    raise SampleError(f".{LABEL} member says {found[:20].decode('ascii', 'replace')}, .{JSON} says label {label}")


def record_from_members(members: Mapping[str, bytes], sequence: bool = False) -> bytes:
    """The serialized record a sample's members (extension -> data) hold; :class:`SampleError` when they
    are not a sample this format writes. ``.json`` holds the label; ``.cls``, which PyTorch pipelines read
    (``to_tuple("jpg", "cls")``), must say the same (:func:`check_label_member`)."""
    if JSON not in members:
        raise SampleError(f"no .{JSON} member")
    try:
        doc = json.loads(members[JSON].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SampleError(f".{JSON} member is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise SampleError(f".{JSON} member is not a JSON object")
    check_label_member(members, doc)
    if TEXT in members:
        text = doc.get(keys.IMAGE_TEXT)
        if not isinstance(text, str) or members[TEXT] != text.encode("utf-8"):
            raise SampleError(f".{TEXT} member is not the caption .{JSON} holds")
    images = {ext: data for ext, data in members.items() if ext not in (JSON, LABEL, TEXT)}
    if sequence:
        clip = SequenceExample()
        _set_features(clip.context.feature, doc)
        frames = []
        for ext, data in images.items():
            number = ext.split(".", 1)[0]
            if "." not in ext or not number.isdigit():
                raise SampleError(f"member .{ext} is not a frame")
            frames.append((int(number), data))
        if frames:
            steps = clip.feature_lists.feature_list[keys.IMAGE_ENCODED].feature
            for _, data in sorted(frames):
                steps.add().bytes_list.value.append(data)
        return clip.SerializeToString(deterministic=True)
    if len(images) > 1:
        raise SampleError(f"{len(images)} image members: .{', .'.join(sorted(images))}")
    example = Example()
    feature = example.features.feature
    _set_features(feature, doc)
    for data in images.values():
        feature[keys.IMAGE_ENCODED].bytes_list.value.append(data)
    return example.SerializeToString(deterministic=True)


json_features = _json_features  # also the JSON of the features other formats keep as JSON (parquet_shards)
set_features = _set_features

__all__ = [
    "SampleError",
    "image_extension",
    "json_features",
    "record_from_members",
    "sample_members",
    "set_features",
]
