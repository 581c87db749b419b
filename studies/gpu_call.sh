#!/usr/bin/env bash
# One call on the GPU machine (../shared/device.md): set-up, the GPU check (issue 41), then the from-scratch study's
# units on the GPU (issue 42) in the time left. Run by the device tool from the repository root, with $OUT set:
#
#   mkdir -p device_payload/wheels device_payload/corpus              # ignored by git (.git/info/exclude)
#   pip download --no-deps --only-binary=:all: --python-version 3.12 datasets==5.2.0 dill==0.4.1 \
#       multiprocess==0.70.19 -d device_payload/wheels
#   cp ../shared/data/pretraining/{wiki-00,wiki-01,books-00,books-01}.txt.xz device_payload/corpus/
#   python -c 'from transformers import AutoTokenizer; from hf_ffn.parity import bundled_checkpoint as b;
#       AutoTokenizer.from_pretrained(b()).save_pretrained("device_payload/bert_tokenizer")'  # bert-base-uncased's
#   device run: bash studies/gpu_call.sh   (carry: device_payload; timeout 600)
#   the study's grid alone, the whole call for its units: CHECK=0 STAGE=rates bash studies/gpu_call.sh (then grid,
#   not placement: its units are 41M tokens from scratch on a fresh machine, ~320 s each at the 130k tokens/s
#   measured, more than a call leaves; they run on the CPU, continuing the 20.5M-token checkpoints)
#   the second size (issue 42, item 5; the grid and placement tables are complete on the CPU, so this is the next
#   GPU use): CHECK=0 STAGE=rates HIDDEN=256 bash studies/gpu_call.sh, then STAGE=grid HIDDEN=256
#
# What comes back under $OUT: gpu.json and gpu.log (studies/benchmark/gpu.py), parity.log (hf-ffn parity --device
# cuda on a small BERT), the units' records and logs (runs.jsonl, launch.log, units.log: studies/pretraining/launch.py).
# Each part runs under its own timeout and prints as it goes; a part that fails leaves the others' results.
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-out/device}
mkdir -p "$OUT"
BUDGET=${BUDGET:-570}  # seconds for this whole script (the call's limit is 600)
start=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - start))); }

# A smoke run on the CPU of a developer machine: SMOKE=1 (no installs, its own python, tiny sizes).
SMOKE=${SMOKE:-0}
if [ "$SMOKE" = 1 ]; then
    CHECK_ARGS="--quick"; UNIT_ARGS="--smoke"; DEVICE=cpu
else
    CHECK_ARGS=""; UNIT_ARGS=""; DEVICE=cuda
    nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv || true
    python3 -m pip install -q --no-index --no-deps --target /tmp/site device_payload/wheels/*.whl
    export PYTHONPATH=/tmp/site
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null
fi
python3 -c 'import torch, transformers, datasets, hf_ffn; print("torch", torch.__version__, "transformers",
transformers.__version__, "datasets", datasets.__version__, "cuda", torch.cuda.is_available())'

# 1. The GPU check (issue 41): parity, unpadded execution, pre-training speed -> gpu.json (written per section).
#    CHECK=0 skips it and step 2 (a call spent on the study's units).
CHECK=${CHECK:-1}
CHECK_LIMIT=${CHECK_LIMIT:-360}  # the GPU check's own limit (issue 41: <= 6 minutes with its set-up)
if [ "$CHECK" = 1 ]; then
timeout $(( $(left) < CHECK_LIMIT ? $(left) : CHECK_LIMIT )) python3 -m studies.benchmark.gpu --output_dir "$OUT" $CHECK_ARGS \
    --data_files device_payload/corpus/wiki-00.txt.xz --bert_tokenizer device_payload/bert_tokenizer 2>&1 | tee "$OUT/gpu.log" | grep -v "it/s\]" | tail -n 60
echo "gpu check done at $(( $(date +%s) - start )) s"

# 2. hf-ffn parity --device cuda, as a user runs it, on a small seeded BERT (exit status: 0 = every row holds).
python3 - <<'EOF'
import torch
from transformers import BertConfig, BertForPreTraining
torch.manual_seed(0)
BertForPreTraining(BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                              intermediate_size=1024)).save_pretrained("/tmp/small_bert")
EOF
for dtype in float32 bfloat16; do
    timeout 60 python3 -m hf_ffn.cli parity --model_name_or_path /tmp/small_bert --device $DEVICE --dtype "$dtype" --attn sdpa \
        >>"$OUT/parity.log" 2>&1
    echo "hf-ffn parity --device $DEVICE --dtype $dtype --attn sdpa: exit $?" | tee -a "$OUT/parity.log"
done
tail -n 4 "$OUT/parity.log"
fi

# 3. The from-scratch study's units on the GPU (issue 42), in the time left, six at once: those of STAGE (recipe, by
#    default; rates, grid or placement once settings.GRID_ARM is set: launch.py --stage) not yet in $OUT/runs.jsonl
#    (studies/pretraining/launch.py; records in $OUT/runs.jsonl, timings and log tails in $OUT/launch.log).
#    $OUT/runs.jsonl starts as the study's committed runs.jsonl, so units recorded on the CPU are not run again and
#    the grid stage sees the rate units' records: the new records are its lines after the study's own.
#    HIDDEN=256 runs item 5's second size (4 x 256, GELU and SwiGLU): STAGE=rates first, then STAGE=grid.
STAGE=${STAGE:-recipe}
HIDDEN=${HIDDEN:-128}
[ -s "$OUT/runs.jsonl" ] || cp studies/pretraining/runs.jsonl "$OUT/runs.jsonl"
if [ "$(left)" -gt 90 ]; then
    timeout $(( $(left) - 10 )) python3 -m studies.pretraining.launch --data_dir device_payload/corpus \
        --out "$OUT" --time_limit $(( $(left) - 25 )) --device $DEVICE --parallel 6 --work_dir out/launch --stage "$STAGE" --hidden_size "$HIDDEN" $UNIT_ARGS \
        2>&1 | tee "$OUT/units.log" | grep -v "it/s\]" | tail -n 40
    units_status=${PIPESTATUS[0]}  # the launcher's (timeout's) status, not the pipe's last command's
    [ "$units_status" = 0 ] || echo "the units' launcher exited with status $units_status (units.log)"
fi
echo "all done at $(( $(date +%s) - start )) s"
exit "${units_status:-0}"
