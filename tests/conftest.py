import os
import sys
from pathlib import Path

# ckpt.jax's tests place arrays on 8 CPU devices; jax reads this when its
# backend starts, which may be in any test, so it is set for all of them.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

sys.path.insert(0, str(Path(__file__).resolve().parent))
