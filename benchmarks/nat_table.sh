#!/usr/bin/env bash
# The non-autoregressive table of docs/translation-results.md, trained from nothing: the de->en teacher
# (configs/multi30k-de-en.yaml), its distilled corpus (beam 4), then on that corpus the 3 + 1 student, the CMLM
# with and without glancing and the CTC model with and without glancing, all for the teacher's number of steps,
# the five side by side (one process each: meant for a GPU, where a step of these 7 M-parameter models is
# bound by kernel launches and Python, so the five share it well); then benchmarks/nat_bench.sh (every system
# through benchmarks/bench_nat.py on test_2016_flickr with val beside it), unless NO_BENCH=1.
#
#   bash benchmarks/nat_table.sh DATA_DIR OUT [STEPS=2100] [DEVICE=cuda] [MINUTES=6]
#
# DATA_DIR holds Multi30k's files (train/val/test_2016_flickr .de.gz/.en.gz); OUT gets the runs, logs/ and
# bench.jsonl. STEPS: every model's (2,100: what the recipe's hour holds on 2 AVX2 EPYC cores, fp32);
# MINUTES: each training's safety limit (a run cut by it says so in its log and metrics.jsonl).
set -euo pipefail
data=$1 out=$2 steps=${3:-2100} device=${4:-cuda} minutes=${5:-6}
aiayn=(python3 -m aiayn)
mkdir -p "$out/logs"
same=(--data-dir "$data" --device "$device" --precision auto --no-auto-steps --max-steps "$steps"
      --time-limit-min "$minutes" --eval-every "$steps" --keep-last 1 --bleu-sentences 300)

stamp() { echo "$(date +%T) $*" | tee -a "$out/logs/stages.txt"; }
stamp "teacher: $steps steps"
"${aiayn[@]}" train --config configs/multi30k-de-en.yaml --output "$out/teacher" "${same[@]}" \
    > "$out/logs/teacher.log" 2>&1
stamp "distill: beam 4, length penalty 1.0"
"${aiayn[@]}" distill --teacher "$out/teacher" --data multi30k --src-lang de --tgt-lang en --data-dir "$data" \
    --output "$out/distilled" --beam-size 4 --length-penalty 1.0 --batch-size "${DISTILL_BATCH:-256}" --device "$device" \
    > "$out/logs/distill.log" 2>&1

stamp "five students side by side"
distilled=(--data "$out/distilled" --tokenizer "$out/teacher/tokenizer" "${same[@]}")
train() {  # NAME CONFIG [flags]
    local name=$1 config=$2
    shift 2
    "${aiayn[@]}" train --config "$config" --output "$out/$name" "${distilled[@]}" "$@" > "$out/logs/$name.log" 2>&1
}
train student31 configs/multi30k-de-en-student.yaml &
train cmlm configs/multi30k-de-en-cmlm.yaml &
train cmlm-glance configs/multi30k-de-en-cmlm.yaml --glance 0.5 --glance-end 0.3 &
train ctc configs/multi30k-de-en-ctc.yaml &
train ctc-glance configs/multi30k-de-en-ctc.yaml --glance 0.5 --glance-end 0.3 &
wait
[ "${NO_BENCH:-0}" = 1 ] || bash "$(dirname "$0")/nat_bench.sh" "$data" "$out" "$device"
stamp "done"
