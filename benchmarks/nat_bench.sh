#!/usr/bin/env bash
# Every system of the non-autoregressive table through benchmarks/bench_nat.py, from the runs that
# benchmarks/nat_table.sh trains (or checkpoint folders of the same names): teacher greedy and beam 4, the 3 + 1
# student greedy, the CMLM and the glancing CMLM at T = 1, 2, 4, 10, the CTC models in one pass.
#
#   bash benchmarks/nat_bench.sh DATA_DIR RUNS [DEVICE=cpu] [LATENCY_SENTENCES=100]  > bench.jsonl
set -euo pipefail
data=$1 out=$2 device=${3:-cpu} latency=${4:-100}
systems=(teacher-greedy="$out/teacher:strategy=greedy,beam_size=1" teacher-beam4="$out/teacher:beam_size=4,length_penalty=1.0"
         student-greedy="$out/student31:strategy=greedy,beam_size=1")
for run in cmlm cmlm-glance; do
    systems+=("$run-T1=$out/$run:iterations=1,length_beam=1" "$run-T2-l3=$out/$run:iterations=2,length_beam=3"
              "$run-T4-l3=$out/$run:iterations=4,length_beam=3" "$run-T10-l5=$out/$run:iterations=10,length_beam=5")
done
systems+=("ctc=$out/ctc" "ctc-glance=$out/ctc-glance")
python3 "$(dirname "$0")/bench_nat.py" --source "$data/test_2016_flickr.de.gz" \
    --reference "$data/test_2016_flickr.en.gz" --valid-source "$data/val.de.gz" --valid-reference "$data/val.en.gz" \
    --device "$device" --latency-sentences "$latency" "${systems[@]/#/--system=}"
