#!/usr/bin/env bash
# Builds gguf_fuzz (clang, ASan+UBSan, libFuzzer), writes a seed corpus of
# small valid GGUF files and fuzzes GGUFFile::parse for $1 seconds (default 60).
# Crashing inputs land in $BUILD_DIR/gguf_artifacts/.
set -euo pipefail
seconds="${1:-60}"
source "$(dirname "$0")/fuzz_build.sh"
shared="${PAGODA_SHARED_DIR:-$root/../shared}"

fuzz_build gguf_fuzz

seeds="$build/gguf_seeds"
corpus="$build/gguf_corpus"
artifacts="$build/gguf_artifacts"
mkdir -p "$seeds" "$corpus" "$artifacts"

python3 - "$seeds" <<'PY'
import struct, sys, os
out = sys.argv[1]

def s(x):
    b = x.encode()
    return struct.pack('<Q', len(b)) + b

def kv(key, vtype, payload):
    return s(key) + struct.pack('<I', vtype) + payload

def gguf(kvs, tensors, align=32, version=3):
    # tensors: (name, dims, ggml_type, data bytes)
    head = b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kvs)) + b''.join(kvs)
    infos, data = b'', b''
    for name, dims, t, blob in tensors:
        infos += s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
        infos += struct.pack('<IQ', t, len(data))
        data += blob + b'\0' * (-len(blob) % align)
    body = head + infos
    return body + b'\0' * (-len(body) % align) + data

scalars = [
    kv('general.architecture', 8, s('llama')),
    kv('u8', 0, struct.pack('<B', 7)), kv('i8', 1, struct.pack('<b', -7)),
    kv('u16', 2, struct.pack('<H', 700)), kv('i16', 3, struct.pack('<h', -700)),
    kv('u32', 4, struct.pack('<I', 70000)), kv('i32', 5, struct.pack('<i', -70000)),
    kv('f32', 6, struct.pack('<f', 0.5)), kv('bool', 7, b'\x01'),
    kv('u64', 10, struct.pack('<Q', 1 << 40)), kv('i64', 11, struct.pack('<q', -(1 << 40))),
    kv('f64', 12, struct.pack('<d', 0.25)),
]
arrays = [
    kv('toks', 9, struct.pack('<IQ', 8, 3) + s('<s>') + s('a') + s('bc')),
    kv('scores', 9, struct.pack('<IQ', 6, 2) + struct.pack('<2f', 0.5, -1.0)),
    kv('types', 9, struct.pack('<IQ', 5, 3) + struct.pack('<3i', 1, 2, 3)),
    kv('empty', 9, struct.pack('<IQ', 0, 0)),
]
tensors = [
    ('a', [6], 0, struct.pack('<6f', *range(6))),
    ('b', [32, 2], 8, bytes(range(68))),
    ('c', [3, 1, 1, 1], 1, b'\x00\x3c' * 3),
    ('d', [256], 12, bytes(144)),
]
files = {
    'all_types.gguf': gguf(scalars + arrays, tensors),
    'align64.gguf': gguf([kv('general.alignment', 4, struct.pack('<I', 64))] + arrays,
                         tensors[:2], align=64),
    'vocab_only.gguf': gguf(arrays, []),
    'v2.gguf': gguf(scalars[:3], tensors[:1], version=2),
    'empty_header.gguf': gguf([], []),
}
for name, blob in files.items():
    with open(os.path.join(out, name), 'wb') as f:
        f.write(blob)
PY
# The start of a real model (metadata + tokenizer; truncated before the data).
if [[ -f "$shared/models/stories260K.gguf" ]]; then
  head -c 16384 "$shared/models/stories260K.gguf" > "$seeds/stories260K_head.gguf"
fi

"$build/gguf_fuzz" "$corpus" "$seeds" -max_total_time="$seconds" -max_len=20000 \
  -malloc_limit_mb=64 -artifact_prefix="$artifacts/" -print_final_stats=1
