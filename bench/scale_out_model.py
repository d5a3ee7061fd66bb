#!/usr/bin/env python3
"""Cost model for Pagoda's scale-out modes (docs/scale-out.md).

Projects tokens/s and TTFT for tensor parallelism (TP), pipeline parallelism
(PP) and prefill/decode disaggregation (PD) on k machines from numbers
measured on one machine: its prefill and decode rates (pagoda generate / bench
model with all its cores) and a network of bandwidth B and latency a. Every
machine is assumed to be like the measured one. Defaults: TinyLlama-1.1B
Q4_0 on the 2-core AMD EPYC VM of bench/RESULTS.md (2026-12-04).

  python3 bench/scale_out_model.py [--prefill 259] [--decode 55] ...
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--prefill", type=float, default=259.0, help="prefill tokens/s of one machine")
p.add_argument("--decode", type=float, default=55.0, help="decode tokens/s of one machine, batch 1")
p.add_argument("--layers", type=int, default=22)
p.add_argument("--hidden", type=int, default=2048)
p.add_argument("--kv-bytes-per-token", type=float, default=22 * 2 * 256 * 2, help="f16 KV, all layers")
p.add_argument("--prompt", type=int, default=2000)
p.add_argument("--chunk", type=int, default=512, help="prefill chunk (max batched tokens)")
p.add_argument("--latency-us", type=float, default=20.0, help="one message's latency")
a = p.parse_args()


def allreduce(k, nbytes, bw):  # ring: 2(k-1) steps of nbytes/k
    return 0.0 if k == 1 else 2 * (k - 1) * (a.latency_us * 1e-6 + nbytes / k / bw)


def send(nbytes, bw):
    return a.latency_us * 1e-6 + nbytes / bw


L, H = a.layers, a.hidden
t_pre = 1.0 / a.prefill  # seconds per prompt token, whole model, one machine
t_dec = 1.0 / a.decode   # seconds per decode step of one sequence
print(f"one machine: prefill {a.prefill:.0f} tok/s, decode {a.decode:.1f} tok/s; "
      f"prompt {a.prompt} tokens, chunk {a.chunk}; latency {a.latency_us:.0f} us")
for gbit in (25, 100):
    bw = gbit * 1e9 / 8
    print(f"\n{gbit} Gb/s")
    print(f"{'k':>3} {'TP prefill tok/s':>17} {'TP decode tok/s':>16} {'PP prefill tok/s':>17} "
          f"{'PP decode tok/s':>16} {'TTFT TP s':>10}")
    for k in (1, 2, 4, 8, 16):
        # TP: compute / k, two all-reduces of tokens x hidden floats per layer.
        chunk_tp = a.chunk * t_pre / k + L * 2 * allreduce(k, a.chunk * H * 4, bw)
        dec_tp = t_dec / k + L * 2 * allreduce(k, H * 4, bw)
        # PP: k stages, M = 2k micro-batches per prefill chunk (Pagoda's rule);
        # a single sequence's decode step is one micro-batch through every stage.
        m = 2 * k
        chunk_pp = (m + k - 1) * (a.chunk * t_pre / (k * m) + (send(a.chunk / m * H * 4, bw) if k > 1 else 0))
        dec_pp = t_dec + (k - 1) * send(H * 4, bw)
        ttft_tp = a.prompt / a.chunk * chunk_tp
        print(f"{k:>3} {a.chunk / chunk_tp:>17.0f} {1 / dec_tp:>16.1f} {a.chunk / chunk_pp:>17.0f} "
              f"{1 / dec_pp:>16.1f} {ttft_tp:>10.2f}")
    # PD: 1 prefill + 1 decode machine vs 2 colocated ones.
    kv = a.prompt * a.kv_bytes_per_token
    ttft_pd = a.prompt * t_pre + send(kv, bw) + t_dec
    print(f"PD 1+1: TTFT {ttft_pd:.2f} s (prefill {a.prompt * t_pre:.2f} s + KV transfer "
          f"{send(kv, bw) * 1e3:.1f} ms for {kv / 2**20:.0f} MiB); TPOT = a decode step "
          f"({t_dec * 1e3:.0f} ms at batch 1), never a prefill chunk. Colocated: a step that "
          f"carries a {a.chunk}-token chunk takes {a.chunk * t_pre + t_dec:.2f} s, the TPOT a "
          f"running decode sees while prompts arrive.")
