#!/usr/bin/python3
"""A TensorBoard event file written independently of headroom's Go writer.

Run with Debian's interpreter (packages python3-protobuf, python3-crcmod):

    /usr/bin/python3 scripts/reference/tfevents_ref.py

It writes internal/tfevents/testdata/sample.tfevents and sample.json (the
events it holds). The Event and Summary messages are declared here from
tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto
(only the fields scalars use, with their field numbers) and serialized by the
protobuf library; records are framed as TFRecords with crcmod's CRC-32C. The
Go test checks that package tfevents writes the same bytes and reads them
back.
"""

import json
import os
import struct

import crcmod.predefined
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf import message_factory

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "..", "internal", "tfevents", "testdata"))

F = descriptor_pb2.FieldDescriptorProto


def messages():
    fd = descriptor_pb2.FileDescriptorProto(name="headroom_tfevents_ref.proto", package="tensorflow", syntax="proto3")
    summary = fd.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL, oneof_index=0)
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".tensorflow.Summary.Value")
    event = fd.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, oneof_index=0,
                    type_name=".tensorflow.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    factory = message_factory.MessageFactory(pool)
    get = getattr(message_factory, "GetMessageClass", None) or factory.GetPrototype
    return get(pool.FindMessageTypeByName("tensorflow.Event"))


crc32c = crcmod.predefined.mkCrcFun("crc-32c")
# RFC 3720 (iSCSI) B.4 test vectors, to be sure of the CRC used.
assert crc32c(bytes(32)) == 0x8A9136AA
assert crc32c(b"\xff" * 32) == 0x62A8AB43
assert crc32c(bytes(range(32))) == 0x46DD794E


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked(n)) + data + struct.pack("<I", masked(data))


# The events: a file version, scalars at steps (several in one event, a
# zero value, a negative one, a non-ASCII tag, a step past 2^31), and an
# event at step 0 with wall time 0 (proto3 leaves both out).
EVENTS = [
    dict(wall_time=1700000000.5, step=0, file_version="brain.Event:2"),
    dict(wall_time=1700000001.25, step=1, values=[["train/loss", 2.302585], ["train/lr", 0.001]]),
    dict(wall_time=1700000002.0, step=2, values=[["train/loss", 1.5]]),
    dict(wall_time=1700000100.125, step=300, values=[["val/accuracy", 0.0], ["mémoire/pic", -3.25e-7]]),
    dict(wall_time=1700000200.0, step=2**40 + 3, values=[["train/loss", 0.125]]),
    dict(wall_time=0.0, step=0, values=[["", 7.0]]),
]


def main():
    Event = messages()
    out = b""
    for e in EVENTS:
        m = Event(wall_time=e["wall_time"], step=e["step"])
        if "file_version" in e:
            m.file_version = e["file_version"]
        for tag, v in e.get("values", []):
            m.summary.value.add(tag=tag, simple_value=v)
        out += record(m.SerializeToString())
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "sample.tfevents"), "wb") as f:
        f.write(out)
    with open(os.path.join(OUT, "sample.json"), "w") as f:
        json.dump(dict(script="scripts/reference/tfevents_ref.py", events=EVENTS), f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", len(out), "bytes,", len(EVENTS), "events")


if __name__ == "__main__":
    main()
