"""``tf.train.Example`` / ``SequenceExample`` message classes without importing TensorFlow.

The messages are plain protobuf: the definitions below are TensorFlow's
``example.proto`` and ``feature.proto`` (same names, field numbers and
packing), registered in a private descriptor pool so they never clash with
TensorFlow's own classes when both are loaded. Serialized bytes are
identical to TensorFlow's, and parse with ``tf.train.Example.FromString`` /
``tf.io.parse_example``. Pipeline workers that only encode records skip the
multi-second TensorFlow import this way.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _field(name, number, ftype, label=_F.LABEL_OPTIONAL, type_name=None, packed=None, oneof=None):
    field = _F(name=name, number=number, type=ftype, label=label, json_name=name)
    if type_name:
        field.type_name = type_name
    if packed is not None:
        field.options.packed = packed
    if oneof is not None:
        field.oneof_index = oneof
    return field


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="img2tfrecord/tensorflow_example.proto", package="tensorflow", syntax="proto3"
    )
    rep = _F.LABEL_REPEATED

    def message(name, *fields, nested=(), oneofs=()):
        msg = fdp.message_type.add(name=name)
        msg.field.extend(fields)
        msg.nested_type.extend(nested)
        for oneof in oneofs:
            msg.oneof_decl.add(name=oneof)
        return msg

    def map_entry(name, value_type):
        entry = descriptor_pb2.DescriptorProto(name=name)
        entry.field.extend(
            [
                _field("key", 1, _F.TYPE_STRING),
                _field("value", 2, _F.TYPE_MESSAGE, type_name=value_type),
            ]
        )
        entry.options.map_entry = True
        return entry

    message("BytesList", _field("value", 1, _F.TYPE_BYTES, rep))
    message("FloatList", _field("value", 1, _F.TYPE_FLOAT, rep, packed=True))
    message("Int64List", _field("value", 1, _F.TYPE_INT64, rep, packed=True))
    message(
        "Feature",
        _field("bytes_list", 1, _F.TYPE_MESSAGE, type_name=".tensorflow.BytesList", oneof=0),
        _field("float_list", 2, _F.TYPE_MESSAGE, type_name=".tensorflow.FloatList", oneof=0),
        _field("int64_list", 3, _F.TYPE_MESSAGE, type_name=".tensorflow.Int64List", oneof=0),
        oneofs=("kind",),
    )
    message(
        "Features",
        _field("feature", 1, _F.TYPE_MESSAGE, rep, type_name=".tensorflow.Features.FeatureEntry"),
        nested=[map_entry("FeatureEntry", ".tensorflow.Feature")],
    )
    message("FeatureList", _field("feature", 1, _F.TYPE_MESSAGE, rep, type_name=".tensorflow.Feature"))
    message(
        "FeatureLists",
        _field("feature_list", 1, _F.TYPE_MESSAGE, rep, type_name=".tensorflow.FeatureLists.FeatureListEntry"),
        nested=[map_entry("FeatureListEntry", ".tensorflow.FeatureList")],
    )
    message("Example", _field("features", 1, _F.TYPE_MESSAGE, type_name=".tensorflow.Features"))
    message(
        "SequenceExample",
        _field("context", 1, _F.TYPE_MESSAGE, type_name=".tensorflow.Features"),
        _field("feature_lists", 2, _F.TYPE_MESSAGE, type_name=".tensorflow.FeatureLists"),
    )
    return fdp


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())

Example = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("tensorflow.Example"))
SequenceExample = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("tensorflow.SequenceExample"))
Features = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("tensorflow.Features"))
