"""Read a Weights & Biases run file (`run-<id>.wandb`) with protobuf's own runtime (Debian's
python3-protobuf): check the `:W&B` header, walk the 32 KiB blocks, verify every chunk's CRC-32
(zlib, over the type byte and the data), join FIRST/MIDDLE/LAST chunks, and print each
`wandb_internal.Record` as a JSON line. The message types are built here from the field numbers of
W&B's wandb_internal.proto (the subset a metrics run uses), so this reader shares no code with the
writer. Usage: read_wandb.py FILE"""
import json
import struct
import sys
import zlib

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

F = descriptor_pb2.FieldDescriptorProto
BLOCK = 32768
HEADER = 7


def _record_type():
    fd = descriptor_pb2.FileDescriptorProto(name="wandb_reader.proto", package="wandb_internal")

    def message(name, *fields):
        m = fd.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = ".wandb_internal." + type_name
        return m

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    item = (("key", 1, F.TYPE_STRING, opt, None), ("nested_key", 2, F.TYPE_STRING, rep, None),
            ("value_json", 16, F.TYPE_STRING, opt, None))
    message("Item", *item)
    message("Timestamp", ("seconds", 1, F.TYPE_INT64, opt, None), ("nanos", 2, F.TYPE_INT32, opt, None))
    message("HistoryStep", ("num", 1, F.TYPE_INT64, opt, None))
    message("HistoryRecord", ("item", 1, F.TYPE_MESSAGE, rep, "Item"),
            ("step", 2, F.TYPE_MESSAGE, opt, "HistoryStep"))
    message("SummaryRecord", ("update", 1, F.TYPE_MESSAGE, rep, "Item"),
            ("remove", 2, F.TYPE_MESSAGE, rep, "Item"))
    message("ConfigRecord", ("update", 1, F.TYPE_MESSAGE, rep, "Item"),
            ("remove", 2, F.TYPE_MESSAGE, rep, "Item"))
    message("RunRecord", ("run_id", 1, F.TYPE_STRING, opt, None), ("entity", 2, F.TYPE_STRING, opt, None),
            ("project", 3, F.TYPE_STRING, opt, None), ("config", 4, F.TYPE_MESSAGE, opt, "ConfigRecord"),
            ("display_name", 8, F.TYPE_STRING, opt, None), ("host", 13, F.TYPE_STRING, opt, None),
            ("start_time", 17, F.TYPE_MESSAGE, opt, "Timestamp"))
    message("RunExitRecord", ("exit_code", 1, F.TYPE_INT32, opt, None), ("runtime", 2, F.TYPE_INT32, opt, None))
    message("Empty")
    record = message(
        "Record", ("num", 1, F.TYPE_INT64, opt, None), ("history", 2, F.TYPE_MESSAGE, opt, "HistoryRecord"),
        ("summary", 3, F.TYPE_MESSAGE, opt, "SummaryRecord"), ("config", 5, F.TYPE_MESSAGE, opt, "ConfigRecord"),
        ("run", 17, F.TYPE_MESSAGE, opt, "RunRecord"), ("exit", 18, F.TYPE_MESSAGE, opt, "RunExitRecord"),
        ("final", 20, F.TYPE_MESSAGE, opt, "Empty"), ("header", 21, F.TYPE_MESSAGE, opt, "Empty"))
    record.oneof_decl.add(name="record_type")
    for f in record.field:
        if f.number != 1:
            f.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    descriptor = pool.FindMessageTypeByName("wandb_internal.Record")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def records(data):
    ident, magic, version = struct.unpack("<4sHB", data[:HEADER])
    if (ident, magic, version) != (b":W&B", 0xBEE1, 0):
        raise ValueError(f"not a W&B run file: header {data[:HEADER]!r}")
    at, pending = HEADER, None
    while at < len(data):
        left = BLOCK - at % BLOCK
        if left < HEADER:
            if data[at:at + left].strip(b"\0"):
                raise ValueError(f"non-zero block padding at {at}")
            at += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[at:at + HEADER])
        chunk = data[at + HEADER:at + HEADER + length]
        if len(chunk) != length or HEADER + length > left:
            raise ValueError(f"chunk at {at} runs past its block or the file")
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            raise ValueError(f"bad checksum in the chunk at {at}")
        at += HEADER + length
        if kind == 1 and pending is None:
            yield chunk
        elif kind == 2 and pending is None:
            pending = chunk
        elif kind == 3 and pending is not None:
            pending += chunk
        elif kind == 4 and pending is not None:
            yield pending + chunk
            pending = None
        else:
            raise ValueError(f"chunk type {kind} out of order at {at}")
    if pending is not None:
        raise ValueError("the file ends inside a record")


def main(path):
    Record = _record_type()
    with open(path, "rb") as f:
        data = f.read()
    for raw in records(data):
        rec = Record()
        rec.ParseFromString(raw)
        print(json.dumps(json_format.MessageToDict(rec, preserving_proto_field_name=True)))


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except ValueError as e:
        print(f"read_wandb: {e}", file=sys.stderr)
        sys.exit(1)
