#!/usr/bin/env bash
# Which operating-system isolation mechanisms this machine supports, tried one by one as root: user, mount,
# pid, net and ipc namespaces, a read-only bind of /, a switch to an unprivileged uid that still reaches the
# GPU, what that uid can do to root's processes, a seccomp filter (through libseccomp) under which CUDA still
# runs, bubblewrap (a `bwrap` on PATH, or one unpacked from a .deb in $BWRAP_DEB), and the LSMs (landlock).
# One line per check: `name | rc | first line of output`. Used to find out what the evaluator's sandbox can
# rely on where it runs (a plain Linux server, CI, the lent GPU machine). The last two lines are cudaperf's
# own boundary (execute/boundary.py) using the bwrap and pyseccomp found or carried here.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
UID_=${PROBE_UID:-60123}
W=$(mktemp -d /tmp/probe-iso.XXXX); chmod 777 "$W"
check() {  # check NAME COMMAND...
  local name=$1; shift
  local out rc
  out=$(timeout 60 "$@" 2>&1); rc=$?
  printf '%-34s | %3d | %s\n' "$name" "$rc" "$(echo "$out" | tr '\n' ' ' | cut -c1-200)"
}
echo "kernel: $(uname -r); $(cat /proc/version | cut -c1-120)"
echo "os: $(. /etc/os-release 2>/dev/null; echo "$PRETTY_NAME")"
echo "lsm: $(cat /sys/kernel/security/lsm 2>/dev/null || echo none)"
echo "seccomp in status: $(grep -E '^Seccomp' /proc/self/status | tr '\n' ' ')"
echo "python: $(command -v $PY) ($($PY -c 'import sys;print(sys.version.split()[0])'))"
ls -l /dev/nvidia* 2>/dev/null | head -5
echo "libs: $(ldconfig -p | grep -oE 'lib(seccomp|cap|selinux)\.so\.[0-9]+' | sort -u | tr '\n' ' ')"
check userns unshare --user --map-root-user id -u
check mountns unshare --mount true
check pidns unshare --pid --fork --mount-proc sh -c 'ls /proc | grep -c "^[0-9]"'
check netns unshare --net sh -c 'cat /proc/net/dev | wc -l'
check ipcns unshare --ipc true
check ro_bind_root unshare --mount sh -c "mount --make-rprivate / && mount --bind / / && mount -o remount,bind,ro / && touch /probe-iso-file; echo touched=\$?"
check rbind_rdonly_recursive unshare --mount sh -c "mount --make-rprivate / && mount --rbind / /mnt && mount -o remount,bind,ro /mnt && touch /mnt/tmp/probe-iso-file; echo touched=\$?"
check setpriv_id setpriv --reuid $UID_ --regid $UID_ --clear-groups --no-new-privs id
check uid_reads_checkout setpriv --reuid $UID_ --regid $UID_ --clear-groups cat pyproject.toml
check uid_cuda setpriv --reuid $UID_ --regid $UID_ --clear-groups --no-new-privs env HOME=$W $PY -c \
  "import torch; x=torch.randn(1<<20,device='cuda'); print('cuda ok', float((x*2).sum()/x.sum()))"
check uid_kill_parent setpriv --reuid $UID_ --regid $UID_ --clear-groups $PY -c "import os; os.kill(os.getppid(), 0); print('signalled')"
check uid_read_proc1_environ setpriv --reuid $UID_ --regid $UID_ --clear-groups cat /proc/1/environ
check uid_write_tmp_file setpriv --reuid $UID_ --regid $UID_ --clear-groups sh -c "echo x > /tmp/probe-iso-uid && echo wrote"
check uid_write_checkout setpriv --reuid $UID_ --regid $UID_ --clear-groups sh -c "echo x > probe-iso-uid && echo wrote"
rm -f /tmp/probe-iso-uid probe-iso-uid /probe-iso-file
# seccomp through libseccomp (pyseccomp from .whl): deny ptrace and process_vm_readv with EPERM, allow the
# rest; then check that the refusal happens and CUDA still runs under the filter.
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --target "$W/site" .whl/pyseccomp*.whl >/dev/null 2>&1
fi
check seccomp_filter env PYTHONPATH="$W/site" $PY -c "
import ctypes, errno, os, pyseccomp as s
f = s.SyscallFilter(s.ALLOW)
for name in ('ptrace', 'process_vm_readv', 'process_vm_writev', 'mount', 'unshare', 'setns', 'bpf'):
    f.add_rule(s.ERRNO(errno.EPERM), name)
f.load()
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(0, 0, 0, 0); print('ptrace', r, errno.errorcode.get(ctypes.get_errno()))
import torch; x = torch.randn(1 << 20, device='cuda'); print('cuda under filter ok', float((x * 2).sum() / x.sum()))
print(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])"
BW=$(command -v bwrap || true)
if [[ -z $BW && -n ${BWRAP_DEB:-} ]]; then
  dpkg -x "$BWRAP_DEB" "$W/bw" && BW="$W/bw/usr/bin/bwrap"
fi
if [[ -n $BW ]]; then
  check bwrap_ldd sh -c "ldd $BW | grep -c 'not found'"
  mkdir -p "$W/job" && chmod 777 "$W/job"
  check bwrap_basic "$BW" --ro-bind / / --dev-bind /dev /dev --proc /proc --bind "$W/job" "$W/job" \
    --unshare-pid --unshare-net --unshare-ipc --unshare-uts --die-with-parent --new-session \
    sh -c "touch $W/job/ok && echo job-write-ok; touch /tmp/probe-iso-bw 2>&1 | head -1; ls /proc | grep -c '^[0-9]'"
  check bwrap_userns_uid "$BW" --unshare-user --uid $UID_ --gid $UID_ --ro-bind / / --dev-bind /dev /dev --proc /proc \
    --unshare-pid --die-with-parent id -u
  check bwrap_cuda "$BW" --ro-bind / / --dev-bind /dev /dev --proc /proc --tmpfs /tmp --bind "$W/job" "$W/job" \
    --unshare-pid --unshare-net --unshare-ipc --die-with-parent --new-session \
    setpriv --reuid $UID_ --regid $UID_ --clear-groups --no-new-privs env HOME=$W/job $PY -c \
    "import torch; x=torch.randn(1<<20,device='cuda'); print('cuda in bwrap ok', float((x*2).sum()/x.sum()))"
else
  echo "bwrap: not found (no bwrap on PATH, no BWRAP_DEB)"
fi
# cudaperf's own boundary (execute/boundary.py) with what was found above: the plan, then a real worker
# (GPU 0 where CUDA works, else CPU mode) whose boundary the parent reads from /proc.
[[ -n $BW ]] && export CUDAPERF_BWRAP=$BW
export PYTHONPATH="$W/site${PYTHONPATH:+:$PYTHONPATH}"
check cudaperf_boundary_plan $PY -c "
from cudaperf.execute import boundary
p = boundary.probe(); print(p.tool, 'seccomp' if p.seccomp_bpf else 'no-seccomp', 'missing:', list(p.missing))"
check cudaperf_boundary_worker $PY -c "
import torch
from cudaperf.execute import WorkerPool, boundary
dev = [0] if torch.cuda.is_available() else None
name = 'gpu_ok' if dev else 'ok'
with WorkerPool(dev, preload=()) as pool:
    r = pool.run({'handler': '$PWD/tests/unit/sandbox_handlers.py:' + name})
    print(r.outcome, r.payload.get('sum'), boundary.state_text(r.sandbox['boundary']), r.logs[-300:])"
rm -rf "$W" /tmp/probe-iso-bw
