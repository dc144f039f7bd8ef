#!/bin/bash
# alternate before (1de4a9b, end of s24) and after (HEAD) eval_modes --cpu, 3 runs each
cd /work/main
for i in 1 2 3; do
  PYTHONPATH=/work/wt-s24end/src python3 /work/wt-s24end/benchmarks/eval_modes.py --cpu --repeats 1 --out /tmp/ab_before_$i.json > /tmp/ab_before_$i.log 2>&1
  python3 benchmarks/eval_modes.py --cpu --repeats 1 --out /tmp/ab_after_$i.json > /tmp/ab_after_$i.log 2>&1
done
echo done > /tmp/ab.done
