"""vLLM platform plugin for the release-oracle venvs (scripts/oracle_venv.sh): vLLM 0.26 has no
VLLM_TARGET_DEVICE=cpu switch for a CUDA wheel, so on a machine without a GPU it finds no platform.
vLLM's own `vllm.platform_plugins` entry-point group lets a plugin name the platform class; this one
names vLLM's unmodified `vllm.platforms.cpu.CpuPlatform`, which is all the config layer needs. Installed
only into an oracle venv, never beside the project."""


def cpu_platform() -> str:
    return "vllm.platforms.cpu.CpuPlatform"
