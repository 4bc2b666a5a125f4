"""What encryption at rest costs: workloads 1 and 4 with the AES-GCM codec on and off, paired.

    bench/.venv/bin/python -m bench.codec                 # standard sizes (about 8 minutes on 2 cores)
    bench/.venv/bin/python -m bench.codec --size quick    # try the harness

"On" is ``DURABLE["CODEC"] = "durable.codecs.AESGCMCodec"`` with one key in
every process (``BENCH_CODEC``, bench/settings.py): every payload of the
workloads (inputs, outputs, step arguments and results) is encrypted when
written and decrypted when read. "Off" keeps payloads in clear. The target is
a throughput ratio on/off of at least 0.85 on both workloads.

Paired as bench/otel.py pairs OpenTelemetry (its harness): workload 1 runs
each repetition's batch with ``--codec off`` and with the codec on in one
process, in alternating order; workload 4 starts each worker and starter
with ``BENCH_CODEC`` set or not. Prints, and writes to
``bench/results/codec-<timestamp>.json``, the paired ratios (throughput on/off).
"""

from __future__ import annotations

from bench.otel import Feature, main

CODEC = Feature("codec", {"off": ["--codec", "off"], "on": []}, "BENCH_CODEC")

if __name__ == "__main__":
    main(CODEC, __doc__)
