"""CPU time the trainer's own process spends while an evaluator it holds is idle (after one real
evaluation), and the threads it runs: a busy thread there would slow a host-bound decoding loop."""
import sys
import threading
import time

from cudaperf.agent.evaluation import LocalEvaluator
from cudaperf.anticheat.policy import Policy
from cudaperf.evaluate import EvalConfig

sys.path.insert(0, "tests/unit")
ev = LocalEvaluator(EvalConfig(device="cpu", mode="rl", policy=Policy(allow_torch_ops=True)))
# one real evaluation to start everything (the scripted answer of the training smoke test)
from test_train_smoke import ANSWER, TASK

from cudaperf.agent.environment import EnvConfig, RefineEnv

env = RefineEnv(EnvConfig(policy=Policy(allow_torch_ops=True)), evaluator=ev)
env.reset(TASK)
t0 = time.perf_counter()
res = env.step(ANSWER.format("+"))
print("evaluated in", round(time.perf_counter() - t0, 1), "s:", res.record.result.outcome)
print("threads:", [t.name for t in threading.enumerate()])
c0, w0 = time.process_time(), time.perf_counter()
time.sleep(5)
print("process CPU while idle: %.3f s over %.1f s" % (time.process_time() - c0, time.perf_counter() - w0))
ev.close()
