#!/usr/bin/env python3
"""Writes seed corpora: fuzz/corpus/safetensors/ (small valid files and one file per kind of hostile
input the parser must refuse), fuzz/corpus/checkpoint_index/ (model.safetensors.index.json texts)
and the generated part of fuzz/corpus/config/ (gen_*.json: duplicate keys, nesting; the other
config seeds are hand-written). Run from anywhere; re-running rewrites the same files."""
import json
import os
import struct

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def file_bytes(header, data=b"", pad=True):
    """8-byte little-endian header length, the header text, then the data section."""
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def valid_seeds():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, float("inf"))
    f64 = struct.pack("<2d", 0.1, -1e300)
    f16 = struct.pack("<4H", 0x3C00, 0x0001, 0x7C00, 0x7E00)
    bf16 = struct.pack("<2H", 0x3F80, 0xFFC1)
    yield "valid_f32", file_bytes({"w": entry("F32", [2, 2], 0, 16)}, f32)
    yield "valid_mixed", file_bytes(
        {
            "__metadata__": {"format": "pt", "config": '{"attention": "gqa"}'},
            "a": entry("F32", [4], 0, 16),
            "b": entry("F64", [2], 16, 32),
            "c": entry("F16", [2, 2], 32, 40),
            "d": entry("BF16", [2], 40, 44),
            "e": entry("I32", [], 44, 48),
            "f": entry("F8_E4M3", [2], 48, 50),
            "g": entry("F8_E5M2", [1, 1], 50, 51),
            "h": entry("BOOL", [1], 51, 52),
        },
        f32 + f64 + f16 + bf16 + struct.pack("<i", 7) + bytes([0x38, 0x7F, 0x3C, 1]),
    )
    yield "valid_empty", file_bytes({})
    yield "valid_zero_size", file_bytes({"z": entry("F32", [0, 3], 0, 0), "s": entry("U8", [], 0, 1)}, b"\x05")
    yield "valid_hf_names", file_bytes(
        {
            "__metadata__": {"format": "pt"},
            "model.layers.3.self_attn.q_norm.weight": entry("BF16", [4], 0, 8),
            "model.layers.3.self_attn.k_norm.weight": entry("BF16", [4], 8, 16),
        },
        struct.pack("<8H", *([0x3F80] * 8)),
    )


def hostile_seeds():
    one = struct.pack("<f", 1.0)
    yield "bad_short", b"\x02\x00\x00"
    yield "bad_length_beyond_file", struct.pack("<Q", 64) + b"{}"
    yield "bad_length_huge", struct.pack("<Q", 2**64 - 1) + b"{}"
    yield "bad_not_json", file_bytes(b"not json", pad=False)
    yield "bad_nul_in_header", file_bytes(b"{}\x00junk", pad=False)
    yield "bad_not_utf8", file_bytes(b'{"\xff": {}}', pad=False)
    yield "bad_not_object", file_bytes([1, 2])
    yield "bad_entry_not_object", file_bytes({"w": [0, 4]}, one)
    yield "bad_entry_missing", file_bytes({"w": {"dtype": "F32", "shape": [1]}}, one)
    yield "bad_entry_extra_key", file_bytes({"w": dict(entry("F32", [1], 0, 4), x=1)}, one)
    yield "bad_dtype", file_bytes({"w": entry("F33", [1], 0, 4)}, one)
    yield "bad_negative_dim", file_bytes({"w": entry("F32", [-1], 0, 4)}, one)
    yield "bad_float_dim", file_bytes({"w": entry("F32", [1.0], 0, 4)}, one)
    yield "bad_overflow", file_bytes({"w": entry("F64", [2**32, 2**32], 0, 8)}, one * 2)
    yield "bad_size_mismatch", file_bytes({"w": entry("F32", [2], 0, 4)}, one)
    yield "bad_begin_after_end", file_bytes({"w": entry("U8", [0], 4, 0)}, one)
    yield "bad_beyond_data", file_bytes({"w": entry("F32", [2], 0, 8)}, one)
    yield "bad_overlap", file_bytes({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 0, 4)}, one)
    yield "bad_gap", file_bytes({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)}, one * 3)
    yield "bad_trailing", file_bytes({"a": entry("F32", [1], 0, 4)}, one + b"\x00")
    a = json.dumps(entry("F32", [1], 0, 4)).encode()
    yield "bad_duplicate", file_bytes(b'{"a":' + a + b',"a":' + a + b"}", one)
    yield "bad_metadata", file_bytes({"__metadata__": {"n": 1}})
    yield "bad_deep_nesting", file_bytes(b'{"w":{"dtype":"F32","shape":' + b"[" * 2000 + b"]" * 2000 + b"}}", pad=False)
    # One level past the format's three (header, entry, shape), and an unclosed 64 kB of '['.
    yield "bad_depth_four", file_bytes({"w": entry("F32", [[1]], 0, 4)}, one)
    yield "bad_depth_metadata", file_bytes({"__metadata__": {"m": {"n": ["v"]}}})
    yield "bad_depth_unclosed", file_bytes(b'{"w":' + b"[" * 65536, pad=False)
    yield "bad_duplicate_metadata", file_bytes(b'{"__metadata__":{"k":"1","k":"2"}}', pad=False)


def index_seeds():
    def index(weight_map, metadata=None):
        doc = {"weight_map": weight_map}
        if metadata is not None:
            doc["metadata"] = metadata
        return json.dumps(doc, indent=2).encode()

    two = {"model.layers.0.self_attn.q_proj.weight": "model-00001-of-00002.safetensors",
           "model.layers.0.self_attn.o_proj.weight": "model-00002-of-00002.safetensors"}
    yield "valid_two_shards", index(two, {"total_size": 1234})
    yield "valid_metadata_strings", index({"a": "a.safetensors"}, {"format": "pt", "total_parameters": [1, 2]})
    yield "valid_subdir", index({"a": "shards/a.safetensors"})
    yield "valid_empty", index({})
    yield "bad_not_json", b'{"weight_map": '
    yield "bad_nul", b'{"weight_map": {}}\x00junk'
    yield "bad_not_object", b"[1]"
    yield "bad_no_weight_map", b'{"metadata": {}}'
    yield "bad_weight_map_array", b'{"weight_map": ["a.safetensors"]}'
    yield "bad_shard_not_string", index({"a": 1})
    yield "bad_escape_parent", index({"a": "../a.safetensors"})
    yield "bad_escape_inner", index({"a": "x/../../a.safetensors"})
    yield "bad_absolute", index({"a": "/etc/passwd"})
    yield "bad_empty_name", index({"a": ""})
    yield "bad_listed_twice", b'{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}'
    yield "bad_duplicate_top", b'{"weight_map": {}, "weight_map": {"a": "x.safetensors"}}'
    yield "bad_depth", b'{"metadata": {"m": [[1]]}, "weight_map": {}}'
    yield "bad_depth_unclosed", b'{"weight_map": ' + b"[" * 65536


def config_seeds():
    yield "gen_bad_duplicate_causal", b'{"attention": "gqa", "hidden": 64, "causal": true, "causal": false}'
    yield "gen_bad_duplicate_nested", (b'{"model_type": "qwen3_next", "rope_scaling": {"type": "yarn", '
                                       b'"factor": 2, "factor": 4}}')
    yield "gen_bad_duplicate_in_array", b'{"layer_types": [{"a": 1, "a": 2}]}'
    yield "gen_bad_depth_65", b'{"a": ' + b"[" * 64 + b"]" * 64 + b"}"
    yield "gen_bad_depth_unclosed", b'{"a": ' + b"[" * 65536
    yield "gen_bad_nul", b'{"attention": "gqa"}\x00{"causal": false}'


def write(subdir, seeds, suffix):
    out = os.path.join(CORPUS, subdir)
    os.makedirs(out, exist_ok=True)
    for name, data in seeds:
        with open(os.path.join(out, name + suffix), "wb") as f:
            f.write(data)


def main():
    write("safetensors", list(valid_seeds()) + list(hostile_seeds()), ".safetensors")
    write("checkpoint_index", index_seeds(), ".json")
    write("config", config_seeds(), ".json")


if __name__ == "__main__":
    main()
