#!/bin/bash
# alternate before (0d1fdd3, end of s25; PYTHONPATH) and after (the working tree) c_rl_cpu.py, 3 runs each
cd /work/main
for i in 1 2 3; do
  PYTHONPATH=/work/wt-s25end/src python3 benchmarks/c_rl_cpu.py --copies 1 --label before-$i --out OUT/before_$i.json > OUT/before_$i.log 2>&1
  python3 benchmarks/c_rl_cpu.py --copies 1 --label after-$i --out OUT/after_$i.json > OUT/after_$i.log 2>&1
done
echo done > OUT/ab.done
