import sys
from cudaperf.anticheat.static import check_source
from cudaperf.anticheat.policy import Policy
for f in sys.argv[1:]:
    fl = check_source(open(f).read(), Policy(allow_torch_ops=True))
    print(f, [(x.code, x.severity.value, x.line) for x in fl])
