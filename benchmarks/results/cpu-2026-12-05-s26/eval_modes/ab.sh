#!/bin/bash
# alternate before (0d1fdd3, end of s25) and after (the working tree) eval_modes --cpu, 3 runs each
cd /work/main
for i in 1 2 3; do
  PYTHONPATH=/work/wt-s25end/src python3 /work/wt-s25end/benchmarks/eval_modes.py --cpu --repeats 1 --out OUT/before_$i.json > OUT/before_$i.log 2>&1
  python3 benchmarks/eval_modes.py --cpu --repeats 1 --out OUT/after_$i.json > OUT/after_$i.log 2>&1
done
echo done > OUT/ab.done
