#!/usr/bin/env python3
"""Builds a binary ONNX model from the ONNX text syntax for lit tests.

Usage: onnx_text.py TEST_FILE -o MODEL.onnx [--section NAME]

Lines starting with '#' (lit RUN/CHECK lines) are dropped; the rest is parsed
with onnx.parser.parse_model (ONNX's own textual format). A file may hold
several models separated by lines '# ----- NAME'; --section picks one.
Exits 1 with the parser's message on malformed text.
"""
import argparse
import sys

import onnx
import onnx.parser


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--section", default=None)
    args = ap.parse_args()
    sections = {None: []}
    current = None
    with open(args.src, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if s.startswith("# -----"):
                current = s[len("# -----") :].strip()
                sections[current] = []
                continue
            if s.startswith("#"):
                continue
            sections.setdefault(current, []).append(line)
    text = "".join(sections.get(args.section, []))
    try:
        model = onnx.parser.parse_model(text)
    except Exception as e:  # the parser raises its own error types
        print(f"onnx_text.py: {e}", file=sys.stderr)
        return 1
    onnx.save(model, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
