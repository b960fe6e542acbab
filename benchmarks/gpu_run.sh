#!/usr/bin/env bash
# One device call: GPU checks and benchmarks of kerneljudge (see docs/benchmarks.md).
# Usage on the GPU machine: bash benchmarks/gpu_run.sh   (writes logs and JSON to $OUT)
set -u
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KERNELJUDGE_CACHE_DIR=/tmp/kj-cache KERNELJUDGE_STORE=/tmp/kj-store.sqlite
# the tests build into the same cache: each CUDA source of this call is built once (tests/conftest.py)
export KERNELJUDGE_TEST_CACHE=$KERNELJUDGE_CACHE_DIR
OUT=${OUT:-/tmp/kj-out}; mkdir -p "$OUT"
kj() { python -m kerneljudge "$@"; }
step() { echo; echo "=== $* ($(date +%T))"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
for part in ${PARTS:-build timer seed judge exploits cost served}; do case $part in
build) step "build the shipped CUDA solution and the seed kernels in parallel (cold cache)"
  kj build src/kerneljudge/suite/solutions/level2/51_*/cuda.py benchmarks/seed/seed_percall.py \
     benchmarks/seed/seed_cached.py tests/candidates/gpu/illegal_address.py -j 4 ;;
side) step "the side-stream-while-timed attack, every finding in full"; timeout 200 python benchmarks/side_stream_check.py ;;
hold) step "the stream hold of the watched timed calls"; timeout 60 python benchmarks/streamhold_check.py ;;
tests) step "the GPU tests (tests/test_gpu.py)"; timeout 300 python -m pytest -q -rA tests/test_gpu.py ;;
forkserver) step "process start and evaluations with the fork server and afresh"
  timeout 200 python benchmarks/fork_server.py --device cuda --repeats 2 ;;
probes) step "the probes' GPU cases"; timeout 300 python benchmarks/probes_gpu_check.py cuda ${PROBES_ONLY:-} ;;
mutants) step "the poison mutants (killed only by the GPU tests)"
  timeout 200 python scripts/mutation_check.py --no-baseline --only check-poison-off --only worker-poison-off ;;
sweep) step "launch-shape sweep of the seed kernels"; timeout 300 python benchmarks/seed_sweep.py ;;
overhead) step "device time vs host overhead of the seed solutions"; timeout 300 python benchmarks/seed_overhead.py ;;
timer) step "timer check"; timeout 300 python benchmarks/timer_check.py ;;
seed) step "seed table"; timeout 400 python benchmarks/seed_table.py ;;
judge) step "strict judge, full size, each shipped solution and the seed kernels"
  kj eval l2/51 @cuda @triton @pytorch benchmarks/seed/seed_cached.py benchmarks/seed/seed_percall.py \
     --json > "$OUT/judge_l2_51.json"
  python - "$OUT/judge_l2_51.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    t = r.get("timing") or {}
    print(f"{r['candidate']['path'].rsplit('/',1)[-1]:18} {r['verdict']:5} median_ms={(t.get('candidate') or {}).get('median_ms')} "
          f"speedup={t.get('speedup')} light%={(t.get('floor') or {}).get('percent_of_light')} "
          f"codes={[f['code'] for f in r['findings']]} stage_ms={r['stage_ms']} probe_ms={r['probes'].get('probe_ms')}")
PY
  ;;
exploits) step "exploits and crash containment on the GPU (small sizes)"
  kj eval l2/51 tests/candidates/gpu/illegal_address.py @cuda tests/candidates/gpu/side_stream.py \
     tests/candidates/gpu/side_stream_joined.py tests/candidates/gpu/unwritten.py --preset small --no-baselines \
     --json > "$OUT/exploits.json"
  python - "$OUT/exploits.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"{r['candidate']['path'].rsplit('/',1)[-1]:24} {r['verdict']:5} "
          f"{[(f['code'], f['message'][:100]) for f in r['findings'] if f['severity'] != 'info']} probe streams: "
          f"{[f.get('details') for f in r['findings'] if f['code']=='side-stream']}")
PY
  ;;
profile) step "where the judge's time goes (the judge and the referee under cProfile, requests by stage)"
  timeout 200 python benchmarks/request_trace.py level2/51 src/kerneljudge/suite/solutions/level2/51_*/cuda.py --warm --profile ;;
cost) step "judge cost: strict eval of the built CUDA solution at full size, warm caches (wall time)"
  TIMEFORMAT="wall %R s"
  for i in 1 2; do time python -m kerneljudge eval l2/51 @cuda --json > "$OUT/cost_$i.json"; done
  python -c "import json; r=json.load(open('$OUT/cost_2.json')); print(r['verdict'], r['stage_ms'], r['build'])"
  echo "floor: a bare python that imports torch and starts a CUDA context"
  time python -c "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
  echo "two evaluations in one command (the second one's worker starts when the first ends)"
  time python -m kerneljudge eval l2/51 @cuda @cuda --json > "$OUT/cost_pool.json"
  python -c "import json; [print(r['verdict'], r['stage_ms']) for r in json.load(open('$OUT/cost_pool.json'))['results']]" ;;
referee) step "referee split: honest solutions at full size, the cross-check's figures (residual)"
  kj eval l2/51 @cuda @triton @pytorch --no-baselines --json > "$OUT/referee_full.json"
  kj eval l2/51 tests/candidates/referee/*.py tests/candidates/gpu/*.py --preset small --no-baselines \
     --json > "$OUT/referee_attacks.json"
  for f in referee_full referee_attacks; do python - "$OUT/$f.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    t = r.get("timing") or {}
    print(f"{r['candidate']['path'].rsplit('/',1)[-1]:22} {r['verdict']:5} median_ms={(t.get('candidate') or {}).get('median_ms')} "
          f"cross_check={t.get('cross_check')} codes={[f['code'] for f in r['findings'] if f['severity'] != 'info']}")
PY
  done ;;
trace) step "where one evaluation's time goes: requests by kind, bytes inline and sealed (full size, built CUDA solution)"
  timeout 60 python benchmarks/transport.py 64 cuda
  timeout 300 python benchmarks/request_trace.py level2/51 src/kerneljudge/suite/solutions/level2/51_*/cuda.py ;;
served) step "judge cost through \`kerneljudge serve\` (a worker kept started between CLI calls; each call comes 8 s after the last)"
  kj serve > "$OUT/serve.log" 2>&1 & server=$!
  until kj serve --status > /dev/null; do sleep 0.2; done
  TIMEFORMAT="wall %R s"
  for i in 1 2 3; do sleep 8; time python -m kerneljudge eval l2/51 @cuda --json > "$OUT/served_$i.json"; done
  for i in 1 2 3; do python -c "import json; r=json.load(open('$OUT/served_$i.json')); print(r['verdict'], r['stage_ms'], r['probes'].get('probe_ms'))"; done
  kj serve --status; kill $server; wait $server; cat "$OUT/serve.log" ;;
twogpu) step "two GPUs against one (issue 20): the same batch, one command after the other"
  problems=${TWO_GPU_PROBLEMS:-level1/19,level1/23,level1/47,level2/51}
  for lanes in 1 2; do
    timeout $(( ${BATCH_STOP_S:-220} + 60 )) python benchmarks/batch_throughput.py --lanes $lanes --pytorch-only --problems $problems \
      --save "$OUT/batch_${lanes}gpu.jsonl"
  done
  python - "$OUT/batch_1gpu.jsonl" "$OUT/batch_2gpu.jsonl" <<'PY'
import json, sys
one, two = ({r["id"]: r for r in map(json.loads, open(p))} for p in sys.argv[1:])
same = [k for k in one if k in two and (one[k]["verdict"], one[k]["codes"]) == (two[k]["verdict"], two[k]["codes"])]
print(f"verdicts identical: {len(same)} of {len(one)} (two-GPU run has {len(two)}); lanes used with 2 GPUs:",
      sorted({r["lane"] for r in two.values()}))
for k in sorted(set(one) | set(two)):
    if k not in same:
        print("  differs:", k, one.get(k), two.get(k))
PY
  step "timing on GPU 0 alone, then while GPU 1 judges a batch (issue 20 item 4)"
  kj eval l2/51 @cuda @triton @pytorch --no-baselines --device cuda:0 --json > "$OUT/alone.json"
  CUDA_VISIBLE_DEVICES=1 timeout 250 python benchmarks/batch_throughput.py --lanes 1 --pytorch-only \
    --problems $problems > "$OUT/other_gpu.log" 2>&1 & other=$!
  sleep 15
  kj eval l2/51 @cuda @triton @pytorch --no-baselines --device cuda:0 --json > "$OUT/during.json"
  echo "the other GPU's batch was still running at the end: $(kill -0 $other 2>/dev/null && echo yes || echo no)"
  kill $other 2>/dev/null; wait $other 2>/dev/null
  python - "$OUT/alone.json" "$OUT/during.json" <<'PY'
import json, sys
alone, during = (json.load(open(p))["results"] for p in sys.argv[1:])
for a, d in zip(alone, during):
    ma, md = a["timing"]["candidate"]["median_ms"], d["timing"]["candidate"]["median_ms"]
    print(f"{a['candidate']['path'].rsplit('/', 1)[-1]:12} alone {a['verdict']} {ma:.5f} ms, during {d['verdict']} "
          f"{md:.5f} ms: {100 * (md - ma) / ma:+.2f}%")
PY
  ;;
batchbudget) step "the cross-check in batches at a 300 ms and a 1000 ms budget (the false timing-tampering, sixth session)"
  for budget in ${BATCH_BUDGETS:-300 1000}; do
    timeout $(( ${BATCH_STOP_S:-220} + 60 )) python benchmarks/batch_throughput.py --problems level1/19,level2/51 --budget-ms $budget \
      --stop-after-s ${BATCH_STOP_S:-220} --save "$OUT/batch_b$budget.jsonl" | tail -4
    python - "$OUT/batch_b$budget.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    c = r.get("cross_check") or {}
    if c.get("excess_ms") is not None:
        print(f"{r['id']:34} {r['verdict']:5} excess {c['excess_ms']:.3f} (tolerance {c['tolerance_ms']:.3f}) paired "
              f"{c.get('paired_excess_ms')} ({c.get('paired_tolerance_ms')}) rounds {c.get('paired_rounds')} calls per "
              f"batch {c.get('calls_per_batch')} / {c.get('reference_calls_per_batch')} slacks {c.get('batch_slacks_ms', [])[:12]}")
PY
  done ;;
lint) step "problem lint at KernelBench's sizes (issue 19; the problems carried in .kb/)"
  timeout 240 python benchmarks/problem_lint_gpu.py --kernelbench .kb/kernelbench ;;
memsweep) step "memory sweep at full size (issue 16): the problems that ran out of memory or failed before (SWEEP_ONLY)"
  timeout ${SWEEP_S:-240} python benchmarks/memory_sweep.py --device cuda --kernelbench .kb/kernelbench \
    --only ${SWEEP_ONLY:-level1/21_,level1/26_,level1/36_,level1/76_,level3/35_} --budget-s ${SWEEP_BUDGET_S:-150} ;;
level1_1) step "level1/1 (4096x4096 matmul) at full size: the honest rewrite (a problem-error in the last batch run)"
  kj eval l1/1 @pytorch --no-baselines --budget-ms 200 ;;
esac; done
