"""Print the machine facts that every committed benchmark result carries (date, GPU, driver, versions)."""

from __future__ import annotations

import datetime
import json
import platform
import subprocess


def env_info() -> dict[str, str]:
    info = {"date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(), "host_cpu_count": str(__import__("os").cpu_count())}
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_cuda"] = str(torch.version.cuda)
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpu_count"] = str(torch.cuda.device_count())
    except ImportError:
        info["torch"] = "missing"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        info["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 else "unknown"
    except (OSError, subprocess.TimeoutExpired, IndexError):
        info["driver"] = "unknown"
    try:
        import cuda.core

        info["cuda_core"] = cuda.core.__version__
    except ImportError:
        info["cuda_core"] = "missing"
    return info


if __name__ == "__main__":
    print(json.dumps(env_info(), indent=1))
