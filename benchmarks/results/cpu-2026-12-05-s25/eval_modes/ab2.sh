#!/bin/bash
cd /work/main
for i in 1 2 3; do
  for v in main var; do
    if [ $v = main ]; then P=/work/main/src; else P=/work/wt-var/src; fi
    PYTHONPATH=$P python3 /work/main/benchmarks/eval_modes.py --cpu --repeats 1 --rl-only --out /tmp/ab2_${v}_$i.json > /tmp/ab2_${v}_$i.log 2>&1
  done
done
echo done > /tmp/ab2.done
