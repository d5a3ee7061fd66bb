#!/usr/bin/env python3
"""Rewrites one string metadata value of a GGUF file (e.g. the pre-tokenizer
name), keeping every tensor byte and re-padding the header so the tensor data
stays aligned.

  tools/set_gguf_string.py FILE KEY VALUE      (in place)
"""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


def main():
    path, key, value = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()
    data = open(path, "rb").read()
    assert data[:4] == b"GGUF", "not a GGUF file"
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    pos = 24
    alignment = 32
    target = None  # (start, end) of the value's length + bytes

    def read_str(p):
        n = struct.unpack_from("<Q", data, p)[0]
        return data[p + 8:p + 8 + n], p + 8 + n

    def skip_value(t, p):
        if t == STRING:
            return read_str(p)[1]
        if t == ARRAY:
            et, n = struct.unpack_from("<IQ", data, p)
            p += 12
            for _ in range(n):
                p = skip_value(et, p)
            return p
        return p + SIZES[t]

    for _ in range(n_kv):
        k, pos = read_str(pos)
        t = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        start = pos
        if k == b"general.alignment":
            alignment = struct.unpack_from("<I", data, pos)[0]
        pos = skip_value(t, pos)
        if k == key:
            assert t == STRING, "the key is not a string"
            target = (start, pos)
    for _ in range(n_tensors):
        _, pos = read_str(pos)
        n_dims = struct.unpack_from("<I", data, pos)[0]
        pos += 4 + 8 * n_dims + 4 + 8
    header_end = pos
    data_start = (header_end + alignment - 1) // alignment * alignment
    assert target is not None, "key not found"
    new_value = struct.pack("<Q", len(value)) + value
    header = data[:target[0]] + new_value + data[target[1]:header_end]
    pad = (-len(header)) % alignment
    out = header + b"\0" * pad + data[data_start:]
    open(path, "wb").write(out)
    print(f"{path}: {key.decode()} = {value.decode()} ({len(data)} -> {len(out)} bytes)")


if __name__ == "__main__":
    main()
